// The generated OpenAPI document.
import type { FastifyPluginAsync } from 'fastify'

const openapi: FastifyPluginAsync = async (fastify) => {
  fastify.get('/openapi.json', {
    config: { public: true, needsDatabase: false },
    schema: { hide: true }
  }, async () => fastify.swagger())
}

export default openapi
