// One log line per request (method, route pattern, status, duration, request id, user),
// and the request id echoed on every response.
import fp from 'fastify-plugin'

export default fp(async function requestLog (fastify) {
  fastify.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id)
  })
  fastify.addHook('onResponse', async (request, reply) => {
    if (request.routeOptions.config.logRequest === false) return
    request.log.info({
      method: request.method,
      route: request.routeOptions.url ?? '(unmatched)',
      status: reply.statusCode,
      durationMs: Math.round(reply.elapsedTime * 100) / 100,
      userId: request.user?.id
    }, 'request')
  })
}, { name: 'request-log' })
