// Load-balancer checks: /health (liveness, no database, not logged) and /ready (readiness: pings
// the database; 503 from the moment shutdown begins, while the instance drains).
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { sql } from 'kysely'
import { Type } from 'typebox'
import { ServiceUnavailableError } from '../errors.js'

// A prober may add a cache-buster (`/health?t=…`): a probe answers whatever its query string.
const AnyQuery = Type.Object({}, { additionalProperties: true })

const PlainOk = { description: 'Plain text `OK`', content: { 'text/plain': { schema: Type.String({ examples: ['OK'] }) } } }

const health: FastifyPluginAsyncTypebox = async (fastify) => {
  fastify.get('/health', {
    config: { public: true, probe: true, logRequest: false, rateLimit: false, needsDatabase: false, shedUnderPressure: false },
    schema: { tags: ['health'], operationId: 'health', summary: 'Liveness', querystring: AnyQuery, response: { 200: PlainOk } }
  }, async (_request, reply) => reply.type('text/plain; charset=utf-8').send('OK'))

  fastify.get('/ready', {
    config: { public: true, probe: true, logRequest: false, rateLimit: false },
    schema: { tags: ['health'], operationId: 'ready', summary: 'Readiness: the database answers', description: '503 while the database is unreachable, and from the moment the instance begins to shut down (it still serves other requests while the balancer moves away).', querystring: AnyQuery, response: { 200: PlainOk } }
  }, async (_request, reply) => {
    if (fastify.draining) throw new ServiceUnavailableError()
    await sql`select 1`.execute(fastify.db)
    return reply.type('text/plain; charset=utf-8').send('OK')
  })
}

export default health
