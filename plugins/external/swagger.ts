// OpenAPI 3 generated from the route schemas; served at /openapi.json (routes/openapi.ts).
import swagger, { type SwaggerOptions } from '@fastify/swagger'
import type { FastifyInstance } from 'fastify'

export const autoConfig = (fastify: FastifyInstance): SwaggerOptions => ({
  openapi: {
    openapi: '3.1.0',
    info: {
      title: 'Task and subscription backend',
      version: '1.0.0',
      license: { name: 'UNLICENSED' },
      description: 'Accounts, tasks, preferences and subscription billing. Every JSON body uses the envelope ' +
        '`{success: true, data}` or `{success: false, error, details?}`; every response carries `X-Request-Id`.'
    },
    servers: [{ url: fastify.config.API_URL }],
    tags: [
      { name: 'auth', description: 'Sign-up, sign-in, sign-out' },
      { name: 'account', description: 'Profile and account deletion' },
      { name: 'tasks', description: 'The caller\'s tasks' },
      { name: 'preferences', description: 'The caller\'s preferences' },
      { name: 'billing', description: 'Subscription checkout, billing portal, cancellation and the provider\'s webhook' },
      { name: 'health', description: 'Liveness and readiness' }
    ],
    components: {
      securitySchemes: {
        bearerAuth: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' },
        cookieAuth: { type: 'apiKey', in: 'cookie', name: 'auth_token' }
      }
    }
  },
  // Our ajv keyword, not part of the public contract.
  transform: ({ schema, url, route }) => ({ schema: stripErrorMessages(schema) as typeof schema, url, route })
})

function stripErrorMessages (value: unknown): unknown {
  if (Array.isArray(value)) return value.map(stripErrorMessages)
  if (value === null || typeof value !== 'object') return value
  return Object.fromEntries(Object.entries(value)
    .filter(([key]) => key !== 'errorMessage')
    .map(([key, inner]) => [key, stripErrorMessages(inner)]))
}

export default swagger
