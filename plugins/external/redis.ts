// Redis, when REDIS_URL is set: the counters every instance must share (the global rate
// limit, the sign-in limits). Unset: fastify.redis is null and counters live in memory.
//
// A Redis that is down or silent must not hold requests: the limits let requests through
// (fail open) when a command fails. A refused connection fails at once; a silent one (a
// partition, a frozen server) would hold each command until TCP gives up, so a command
// unanswered within REDIS_COMMAND_TIMEOUT_MS fails, and a connection that has stayed silent
// that long after a write is dropped: until a new one is ready, commands fail at once (no
// offline queue) instead of each waiting out the timeout. The outage is logged once, its end
// once, and `redis_up` says which it is.
import fp from 'fastify-plugin'
import type { Redis } from 'ioredis'

declare module 'fastify' {
  interface FastifyInstance {
    redis: Redis | null
  }
}

export default fp(async function redis (fastify) {
  const { config, log } = fastify
  if (!config.limits.redisUrl) {
    fastify.decorate('redis', null)
    return
  }
  const timeout = config.limits.redisCommandTimeoutMs
  // Loaded only when used: an instance without REDIS_URL does not pay for it (issue 34, start-up).
  const { Redis } = await import('ioredis')
  const client = new Redis(config.limits.redisUrl, {
    connectTimeout: 1000,
    commandTimeout: timeout,
    socketTimeout: timeout,
    // Probes an idle connection after 10 s of silence, as the database pool does.
    keepAlive: 10_000,
    maxRetriesPerRequest: 1,
    enableOfflineQueue: false,
    lazyConnect: false
  })

  let up = false
  let down = false
  const wentDown = (reason: string) => {
    up = false
    if (down) return
    down = true
    log.warn({ reason }, 'redis unavailable: the shared rate limits let requests through until it is back')
  }
  client.on('ready', () => {
    up = true
    if (!down) return
    down = false
    log.info('redis reachable again: the shared rate limits apply')
  })
  client.on('close', () => wentDown('connection closed'))
  // Every failed reconnection attempt is an 'error' too: one line for the outage is enough.
  client.on('error', (err) => {
    if (!down) wentDown(err.message)
    else log.debug({ err }, 'redis error')
  })
  // Registered once every plugin is loaded: the metrics plugin comes after the rate limit,
  // which comes after this one.
  fastify.addHook('onReady', async () => {
    fastify.metrics.gauge({
      name: 'redis_up',
      help: 'Whether Redis answers (1) or the shared rate limits are letting requests through without it (0)',
      read: () => up ? 1 : 0
    })
  })
  fastify.addHook('onClose', async () => {
    client.removeAllListeners('close')
    await client.quit().catch(() => client.disconnect())
  })
  fastify.decorate('redis', client)
}, { name: 'redis' })
