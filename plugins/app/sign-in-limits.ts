// Limits on what checks a password or a one-time link, and on what sends one (OWASP's
// Authentication and Credential Stuffing cheat sheets; NIST SP 800-63B §5.2.2):
// - attempts per client (an IPv4 address, an IPv6 /64: client-address.ts), every attempt
//   counted, AUTH_RATE_LIMIT_MAX per RATE_LIMIT_WINDOW_MS, refused before any query or hash;
//   requests that send mail are counted apart, so they never hold back a sign-in;
// - failed password checks per account, from every client together, with the same cap: past
//   it the account is locked for the rest of the window, so many clients guess no more than
//   one could. Its owner keeps access from the devices they signed in on: a successful
//   sign-in sets a device cookie (OWASP's "device cookies": a signed nonce bound to the
//   account) that lets that device past the lock, until the device fails that many times
//   itself;
// - reset and verification mail per recipient address: EMAIL_LINK_MAX_PER_HOUR, after which
//   the request is answered as always (202) and nothing is sent.
// With REDIS_URL the counters are shared by every instance (a Redis outage lets requests
// through, like the global limit); otherwise they live in memory, bounded in number.
// @fastify/rate-limit counts every request it sees and cannot read a counter without
// counting, which a failures-only policy needs: hence these few counters of our own.
import { createHash, createHmac, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto'
import type { FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import type { Redis } from 'ioredis'
import { clientKey } from '../../client-address.js'
import { rateLimited } from '../../errors.js'

export interface SignInLimits {
  /**
   * Before a password or link check: counts the attempt from this client, and refuses (429)
   * a client past its limit, or, with `email`, an attempt on a locked account from a device
   * that has not signed in to it.
   */
  admit: (request: FastifyRequest, email?: string) => Promise<void>
  /** The check failed: counts against the account (with `email`) and the device it came from. */
  failed: (request: FastifyRequest, email?: string) => Promise<void>
  /** The check succeeded: this device may sign in to `email` while the account is locked. */
  succeeded: (request: FastifyRequest, reply: FastifyReply, email: string) => Promise<void>
  /**
   * Before sending a reset or verification link to `email`: counts the request from this
   * client (429 past its limit, counted apart from sign-ins), and says whether the address
   * may receive another link this hour (false: answer as usual, send nothing).
   */
  admitMail: (request: FastifyRequest, email: string) => Promise<boolean>
}

declare module 'fastify' {
  interface FastifyInstance {
    signInLimits: SignInLimits
  }
}

export const DEVICE_COOKIE = 'sign_in_device'
// A device stays known for as long as a person keeps using it; it is renewed at every sign-in.
const DEVICE_COOKIE_MAX_AGE_SECONDS = 180 * 24 * 60 * 60
const HOUR_MS = 60 * 60_000

interface Counters {
  /** Adds one; the count and the milliseconds until the key's window ends. */
  increment: (key: string, windowMs: number) => Promise<{ count: number, ttlMs: number }>
  /** The count and the milliseconds until the key's window ends (0 and 0 when none). */
  get: (key: string) => Promise<{ count: number, ttlMs: number }>
}

const MAX_MEMORY_KEYS = 100_000

function memoryCounters (): Counters {
  const counts = new Map<string, { count: number, endsAt: number }>()
  const live = (key: string) => {
    const entry = counts.get(key)
    if (entry === undefined || entry.endsAt > Date.now()) return entry
    counts.delete(key)
    return undefined
  }
  return {
    async increment (key, windowMs) {
      let entry = live(key)
      if (entry === undefined) {
        // A Map keeps insertion order: the oldest window goes first.
        if (counts.size >= MAX_MEMORY_KEYS) counts.delete(counts.keys().next().value!)
        entry = { count: 0, endsAt: Date.now() + windowMs }
        counts.set(key, entry)
      }
      entry.count++
      return { count: entry.count, ttlMs: entry.endsAt - Date.now() }
    },
    async get (key) {
      const entry = live(key)
      return entry === undefined ? { count: 0, ttlMs: 0 } : { count: entry.count, ttlMs: entry.endsAt - Date.now() }
    }
  }
}

const INCREMENT = `local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return {count, redis.call('PTTL', KEYS[1])}`

function redisCounters (redis: Redis, onError: (err: Error) => void): Counters {
  const prefix = 'tsb-sign-in-'
  const failOpen = async <T>(fallback: T, call: () => Promise<T>): Promise<T> => {
    try {
      return await call()
    } catch (err) {
      onError(err as Error)
      return fallback
    }
  }
  return {
    increment: (key, windowMs) => failOpen({ count: 0, ttlMs: 0 }, async () => {
      const [count, ttlMs] = await redis.eval(INCREMENT, 1, prefix + key, windowMs) as [number, number]
      return { count, ttlMs }
    }),
    get: (key) => failOpen({ count: 0, ttlMs: 0 }, async () => {
      const [count, ttlMs] = await redis.multi().get(prefix + key).pttl(prefix + key).exec() as Array<[Error | null, unknown]>
      return { count: Number(count?.[1] ?? 0), ttlMs: Math.max(0, Number(ttlMs?.[1] ?? 0)) }
    })
  }
}

// Counters keyed by an email hold a digest, not the address: Redis keys are readable by its operators.
const accountKey = (email: string) => createHash('sha256').update(email).digest('base64url').slice(0, 22)

export default fp(async function signInLimits (fastify) {
  const { config, log } = fastify
  const max = config.AUTH_RATE_LIMIT_MAX
  const windowMs = config.RATE_LIMIT_WINDOW_MS
  const linksPerHour = config.EMAIL_LINK_MAX_PER_HOUR
  const counters = fastify.redis === null
    ? memoryCounters()
    : redisCounters(fastify.redis, (err) => log.debug({ err }, 'sign-in limits: redis unavailable, letting requests through'))

  // Device cookies: `<nonce>.<HMAC(nonce, account)>`, with a key of their own derived from the
  // token secret. Only a device that signed in to the account holds one that checks.
  const deviceKey = Buffer.from(hkdfSync('sha256', config.AUTH_JWT_SECRET, 'sign-in-device', 'device cookie', 32))
  const deviceMac = (nonce: string, email: string) => createHmac('sha256', deviceKey).update(`${nonce}\n${email}`).digest()
  const cookieOptions = { httpOnly: true, sameSite: 'lax', path: '/', secure: new URL(config.API_URL).protocol === 'https:' } as const
  /** The nonce of the request's device cookie when it was issued for `email`. */
  const deviceOf = (request: FastifyRequest, email: string): string | undefined => {
    const [nonce, mac, extra] = (request.cookies[DEVICE_COOKIE] ?? '').split('.')
    if (nonce === undefined || mac === undefined || extra !== undefined || !/^[\w-]{22}$/.test(nonce)) return undefined
    const given = Buffer.from(mac, 'base64url')
    const expected = deviceMac(nonce, email)
    return given.length === expected.length && timingSafeEqual(given, expected) ? nonce : undefined
  }

  const limits: SignInLimits = {
    async admit (request, email) {
      if (max === 0) return
      const attempts = await counters.increment(`attempts:${clientKey(request.ip)}`, windowMs)
      if (attempts.count > max) throw rateLimited(attempts.ttlMs / 1000)
      if (email === undefined) return
      const failures = await counters.get(`failures:${accountKey(email)}`)
      if (failures.count < max) return
      const device = deviceOf(request, email)
      if (device !== undefined && (await counters.get(`device-failures:${device}`)).count < max) return
      throw rateLimited(failures.ttlMs / 1000)
    },
    async failed (request, email) {
      if (max === 0 || email === undefined) return
      await counters.increment(`failures:${accountKey(email)}`, windowMs)
      const device = deviceOf(request, email)
      if (device !== undefined) await counters.increment(`device-failures:${device}`, windowMs)
    },
    async succeeded (request, reply, email) {
      const nonce = deviceOf(request, email) ?? randomBytes(16).toString('base64url')
      reply.setCookie(DEVICE_COOKIE, `${nonce}.${deviceMac(nonce, email).toString('base64url')}`, { ...cookieOptions, maxAge: DEVICE_COOKIE_MAX_AGE_SECONDS })
    },
    async admitMail (request, email) {
      if (max > 0) {
        const attempts = await counters.increment(`mail-attempts:${clientKey(request.ip)}`, windowMs)
        if (attempts.count > max) throw rateLimited(attempts.ttlMs / 1000)
      }
      if (linksPerHour === 0) return true
      return (await counters.increment(`mail-to:${accountKey(email)}`, HOUR_MS)).count <= linksPerHour
    }
  }
  fastify.decorate('signInLimits', limits)
}, { name: 'sign-in-limits', dependencies: ['redis', '@fastify/cookie'] })
