// One log line per request (method, route pattern, status, duration, request id, user)
// at LOG_LEVEL info or below (the default). The hook is synchronous; above info (the
// benchmark runs at warn) it is not added at all: the level is fixed at start-up. (The
// request id goes onto every answer in plugins/response-headers.ts.)
import fp from 'fastify-plugin'

const LEVELS_WITH_INFO = new Set(['info', 'debug', 'trace'])

export default fp(async function requestLog (fastify) {
  if (!LEVELS_WITH_INFO.has(fastify.config.log.level)) return
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
