// The global per-address ceiling on every route (except the health checks), counted before
// anything else a request costs, authentication included. With REDIS_URL the counters live
// in Redis, shared by every instance; otherwise in memory. (The tighter limits on sign-in,
// sign-up and password changes: plugins/app/sign-in-limits.ts.)
import rateLimit from '@fastify/rate-limit'
import fp from 'fastify-plugin'
import { clientKey } from '../../client-address.js'
import { RateLimitedError } from '../../errors.js'

export default fp(async function rateLimits (fastify) {
  const { config } = fastify
  await fastify.register(rateLimit, {
    // RATE_LIMIT_MAX=0 turns the ceiling off.
    global: config.limits.requestsPerWindow > 0,
    max: Math.max(config.limits.requestsPerWindow, 1),
    timeWindow: config.limits.windowMs,
    redis: fastify.redis ?? undefined,
    nameSpace: 'tsb-rate-limit-',
    skipOnError: true,
    // The client behind trusted proxies, an IPv6 client by its /64 (client-address.ts).
    keyGenerator: (request) => clientKey(request.ip),
    errorResponseBuilder: () => new RateLimitedError()
  })
}, { name: 'rate-limit', dependencies: ['redis'] })
