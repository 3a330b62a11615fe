// Limits on everything that checks a password or claims an email (sign-in, sign-up, a
// password change), AUTH_RATE_LIMIT_MAX per RATE_LIMIT_WINDOW_MS:
// - attempts per client address, every attempt counted, refused before any database query
//   or hash;
// - failures per email (a wrong password, an email already taken), from any address. An
//   email past its limit is refused to addresses that failed recently; an address with no
//   recent failure still gets its attempt, so guessing from many addresses cannot lock the
//   owner out of their account. A success clears the email's failures.
// With REDIS_URL the counters are shared by every instance (a Redis outage lets requests
// through, like the global limit); otherwise they live in memory, bounded in number.
// @fastify/rate-limit counts every request it sees and cannot read a counter without
// counting, which a failures-only policy needs: hence these few counters of our own.
import type { FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { clientKey } from '../../client-address.js'
import type { Redis } from 'ioredis'
import { rateLimited } from '../../errors.js'

/** What an email's failures count towards: sign-in (password guesses) or sending it mail. */
export type Scope = 'sign-in' | 'mail'

export interface SignInLimits {
  /**
   * Counts an attempt from this address; throws 429 when it must wait. With `email`, also
   * refuses an address that failed recently once that email is past its failures. `scope`
   * keeps kinds apart: 'mail' (requests that send an email) never holds back a sign-in.
   */
  admit: (request: FastifyRequest, email?: string, scope?: Scope) => Promise<void>
  /** The attempt failed: counts against the address and, when given, the email. */
  failed: (request: FastifyRequest, email?: string, scope?: Scope) => Promise<void>
  /** The attempt succeeded: the email's failures are forgotten. */
  succeeded: (email: string) => Promise<void>
}

declare module 'fastify' {
  interface FastifyInstance {
    signInLimits: SignInLimits
  }
}

interface Counters {
  /** Adds one; the count and the milliseconds until the window ends. */
  increment: (key: string) => Promise<{ count: number, ttlMs: number }>
  get: (key: string) => Promise<number>
  reset: (key: string) => Promise<void>
}

const MAX_MEMORY_KEYS = 100_000

function memoryCounters (windowMs: number): Counters {
  const counts = new Map<string, { count: number, endsAt: number }>()
  const live = (key: string) => {
    const entry = counts.get(key)
    if (entry !== undefined && entry.endsAt <= Date.now()) counts.delete(key)
    return entry !== undefined && entry.endsAt > Date.now() ? entry : undefined
  }
  return {
    async increment (key) {
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
    get: async (key) => live(key)?.count ?? 0,
    reset: async (key) => { counts.delete(key) }
  }
}

const INCREMENT = `local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return {count, redis.call('PTTL', KEYS[1])}`

function redisCounters (redis: Redis, windowMs: number, onError: (err: Error) => void): Counters {
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
    increment: (key) => failOpen({ count: 0, ttlMs: 0 }, async () => {
      const [count, ttlMs] = await redis.eval(INCREMENT, 1, prefix + key, windowMs) as [number, number]
      return { count, ttlMs }
    }),
    get: (key) => failOpen(0, async () => Number(await redis.get(prefix + key) ?? 0)),
    reset: (key) => failOpen(undefined, async () => { await redis.del(prefix + key) })
  }
}

const failuresOf = (email: string, scope: Scope): string => scope === 'sign-in' ? `failures:${email}` : `mail-requests:${email}`

export default fp(async function signInLimits (fastify) {
  const { config, log } = fastify
  const max = config.AUTH_RATE_LIMIT_MAX
  const windowMs = config.RATE_LIMIT_WINDOW_MS
  const counters = fastify.redis === null
    ? memoryCounters(windowMs)
    : redisCounters(fastify.redis, windowMs, (err) => log.warn({ err }, 'sign-in limits: redis unavailable, letting requests through'))

  const limits: SignInLimits = max === 0
    ? { admit: async () => {}, failed: async () => {}, succeeded: async () => {} }
    : {
        async admit (request, email, scope = 'sign-in') {
          const attempts = await counters.increment(`attempts:${clientKey(request.ip)}`)
          if (attempts.count > max) throw rateLimited(attempts.ttlMs / 1000)
          if (email !== undefined && await counters.get(failuresOf(email, scope)) >= max && await counters.get(`failures-from:${clientKey(request.ip)}`) > 0) {
            throw rateLimited(windowMs / 1000)
          }
        },
        async failed (request, email, scope = 'sign-in') {
          if (email !== undefined) await counters.increment(failuresOf(email, scope))
          await counters.increment(`failures-from:${clientKey(request.ip)}`)
        },
        succeeded: (email) => counters.reset(failuresOf(email, 'sign-in'))
      }
  fastify.decorate('signInLimits', limits)
}, { name: 'sign-in-limits', dependencies: ['redis'] })
