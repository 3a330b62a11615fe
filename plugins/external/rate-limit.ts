// Rate limits: a global per-IP ceiling on every route (except health checks), and
// tighter per-IP and per-email limits on sign-up and sign-in (routes/auth). With
// REDIS_URL the counters live in Redis, shared by every instance; otherwise in memory.
import rateLimit from '@fastify/rate-limit'
import fp from 'fastify-plugin'
import { Redis } from 'ioredis'
import { RateLimitedError } from '../../schemas/errors.js'

export default fp(async function rateLimits (fastify) {
  const { config, log } = fastify
  let redis: Redis | undefined
  if (config.REDIS_URL) {
    // Fail fast: a Redis outage must not stall requests (skipOnError lets them through).
    redis = new Redis(config.REDIS_URL, { connectTimeout: 1000, maxRetriesPerRequest: 1, enableOfflineQueue: false, lazyConnect: false })
    redis.on('error', (err) => log.warn({ err }, 'rate-limit redis error'))
    fastify.addHook('onClose', async () => { await redis?.quit().catch(() => redis?.disconnect()) })
  }
  await fastify.register(rateLimit, {
    // RATE_LIMIT_MAX=0 turns the global ceiling off; the decorator stays for the auth limits.
    global: config.RATE_LIMIT_MAX > 0,
    max: Math.max(config.RATE_LIMIT_MAX, 1),
    timeWindow: config.RATE_LIMIT_WINDOW_MS,
    redis,
    nameSpace: 'tsb-rate-limit-',
    skipOnError: true,
    errorResponseBuilder: () => new RateLimitedError()
  })
}, { name: 'rate-limit' })
