// What a person or a browser finds at the service's address. GET / answers 200 in the envelope
// with where to go (the reference page, the OpenAPI document, the health check): a newcomer
// opening http://localhost:3002 got a bare 404. /favicon.ico answers 204, so a browser on the
// /docs page stops logging a 404 for it. Neither is part of the API (the spec has no GET /):
// hidden from the OpenAPI document, like /docs and /openapi.json (docs/api.md).
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'

const ServiceIndex = Type.Object({
  success: Type.Literal(true),
  data: Type.Object({ docs: Type.String(), openapi: Type.String(), health: Type.String() })
})

const INDEX = { success: true, data: { docs: '/docs', openapi: '/openapi.json', health: '/health' } } as const

const root: FastifyPluginAsyncTypebox = async (fastify) => {
  fastify.get('/', {
    config: { public: true, needsDatabase: false },
    schema: { hide: true, response: { 200: ServiceIndex } }
  }, async () => INDEX)

  fastify.get('/favicon.ico', {
    config: { public: true, needsDatabase: false, logRequest: false },
    schema: { hide: true }
  }, async (_request, reply) => reply.code(204).header('cache-control', 'public, max-age=86400').send())
}

export default root
