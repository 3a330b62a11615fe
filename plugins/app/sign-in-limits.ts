// The sign-in limits of accounts/limits.ts, with their counters where this deployment keeps
// them: with REDIS_URL shared by every instance (a Redis outage lets requests through, like
// the global limit); otherwise in memory, bounded in number. Also sets the device cookie those
// limits hand out (read back with the other client facts by clientOf, client-address.ts).
// @fastify/rate-limit counts every request it sees and cannot read a counter without
// counting, which a failures-only policy needs: hence these few counters of our own.
import type { FastifyReply } from 'fastify'
import fp from 'fastify-plugin'
import type { Redis } from 'ioredis'
import { deviceKeyFrom, memoryCounters, signInLimits, type Counters, type SignInLimits } from '../../accounts/limits.js'
import { DEVICE_COOKIE } from '../../client-address.js'

declare module 'fastify' {
  interface FastifyInstance {
    signInLimits: SignInLimits
    /** Sets the device cookie a successful check gave (Attempt.succeeded). */
    rememberDevice: (reply: FastifyReply, deviceCookie: string) => void
  }
}

// A device stays known for as long as a person keeps using it; it is renewed at every sign-in.
const DEVICE_COOKIE_MAX_AGE_SECONDS = 180 * 24 * 60 * 60

const INCREMENT = `local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return {count, redis.call('PTTL', KEYS[1])}`

/** Counters in Redis under `prefix`, shared by every instance; an error lets the request through (onError hears of it). */
export function redisCounters (redis: Redis, prefix: string, onError: (err: Error) => void): Counters {
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

export default fp(async function signInLimitsPlugin (fastify) {
  const { config, log } = fastify
  const counters = fastify.redis === null
    ? memoryCounters()
    : redisCounters(fastify.redis, 'tsb-sign-in-', (err) => log.debug({ err }, 'sign-in limits: redis unavailable, letting requests through'))
  fastify.decorate('signInLimits', signInLimits({
    counters,
    max: config.limits.signInMax,
    windowMs: config.limits.windowMs,
    linksPerHour: config.limits.emailLinksPerHour,
    deviceKey: deviceKeyFrom(config.auth.jwtSecret)
  }))

  const cookieOptions = { httpOnly: true, sameSite: 'lax', path: '/', secure: new URL(config.http.apiUrl).protocol === 'https:', maxAge: DEVICE_COOKIE_MAX_AGE_SECONDS } as const
  fastify.decorate('rememberDevice', (reply: FastifyReply, deviceCookie: string) => {
    reply.setCookie(DEVICE_COOKIE, deviceCookie, cookieOptions)
  })
}, { name: 'sign-in-limits', dependencies: ['redis', '@fastify/cookie'] })
