// Redis, when REDIS_URL is set: the counters every instance must share (the global rate
// limit, the sign-in limits). Unset: fastify.redis is null and counters live in memory.
import fp from 'fastify-plugin'
import { Redis } from 'ioredis'

declare module 'fastify' {
  interface FastifyInstance {
    redis: Redis | null
  }
}

export default fp(async function redis (fastify) {
  const { config, log } = fastify
  if (!config.REDIS_URL) {
    fastify.decorate('redis', null)
    return
  }
  // Fail fast: a Redis outage must not stall requests (the limits let requests through).
  const client = new Redis(config.REDIS_URL, { connectTimeout: 1000, maxRetriesPerRequest: 1, enableOfflineQueue: false, lazyConnect: false })
  client.on('error', (err) => log.warn({ err }, 'redis error'))
  fastify.addHook('onClose', async () => { await client.quit().catch(() => client.disconnect()) })
  fastify.decorate('redis', client)
}, { name: 'redis' })
