// One log line per request (method, route pattern, status, duration, request id, user),
// and the request id echoed on every response. Both hooks are synchronous, and at a
// LOG_LEVEL above info (production runs at warn) the per-request line is not even
// assembled: the level is fixed at start-up, so the hook is simply not added.
import fp from 'fastify-plugin'

const LEVELS_WITH_INFO = new Set(['info', 'debug', 'trace'])

export default fp(async function requestLog (fastify) {
  fastify.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id)
    done()
  })
  if (!LEVELS_WITH_INFO.has(fastify.config.LOG_LEVEL)) return
  fastify.addHook('onResponse', (request, reply, done) => {
    const { config, url } = request.routeOptions
    if (config.logRequest !== false) {
      request.log.info({
        method: request.method,
        route: url ?? '(unmatched)',
        status: reply.statusCode,
        durationMs: Math.round(reply.elapsedTime * 100) / 100,
        userId: request.user?.id
      }, 'request')
    }
    done()
  })
}, { name: 'request-log' })
