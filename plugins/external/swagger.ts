// OpenAPI 3 generated from the route schemas; served at /openapi.json (routes/openapi.ts).
import { existsSync, readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import swagger, { type SwaggerOptions } from '@fastify/swagger'
import type { FastifyInstance } from 'fastify'
import type { OpenAPIV3_1 as OpenApi } from 'openapi-types'
import { ERROR_DESCRIPTIONS } from '../../schemas/common.js'

export const autoConfig = (fastify: FastifyInstance): SwaggerOptions => ({
  openapi: {
    openapi: '3.1.0',
    info: {
      title: 'Task and subscription backend',
      version: packageVersion(),
      // A private service (package.json: private, no license); SPDX's form for a license of one's own.
      license: { name: 'Proprietary', identifier: 'LicenseRef-Proprietary' },
      description: 'Accounts, tasks, preferences and subscription billing. Every JSON body uses the envelope ' +
        '`{success: true, data}` or `{success: false, error, code, details?}` (`code`: a stable identifier to ' +
        'branch on, one of `ErrorCode`; `error`: the text for people); every response carries `X-Request-Id`.'
    },
    servers: [{ url: fastify.config.http.apiUrl }],
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
        cookieAuth: { type: 'apiKey', in: 'cookie', name: 'auth_token' },
        apiKeyAuth: {
          type: 'http',
          scheme: 'bearer',
          bearerFormat: 'tsk_ personal API key',
          description: 'A personal API key (POST /account/api-keys; docs/api-keys.md) as `Authorization: Bearer tsk_…`. Only operations that list ' +
            'this scheme take one, and only with the scopes listed there; elsewhere 403 `API_KEY_NOT_ALLOWED`'
        }
      }
    }
  },
  // Shared schemas (plugins/shared-schemas.ts) are listed under their own $id.
  refResolver: {
    buildLocalReference: (json: { $id?: unknown }, _baseUri: unknown, _fragment: unknown, i: number) => typeof json.$id === 'string' ? json.$id : `def-${i}`
  },
  transformObject: (document) => 'openapiObject' in document
    ? shareErrorResponses(stripErrorMessages(document.openapiObject) as OpenApi.Document)
    : document.swaggerObject
})

/**
 * The service's version, package.json's: the nearest package.json above this file, which is
 * the project's from the sources, from dist/ (the image copies it beside dist/) and from a
 * test build under .tap/.
 */
function packageVersion (from = dirname(fileURLToPath(import.meta.url))): string {
  const file = join(from, 'package.json')
  if (existsSync(file)) return (JSON.parse(readFileSync(file, 'utf8')) as { version: string }).version
  if (dirname(from) === from) throw new Error('no package.json above plugins/external/swagger')
  return packageVersion(dirname(from))
}

// The name under components.responses of the error envelope at each status.
const ERROR_RESPONSE_NAMES: Record<string, string> = {
  400: 'BadRequest',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'NotFound',
  409: 'Conflict',
  413: 'PayloadTooLarge',
  415: 'UnsupportedMediaType',
  422: 'UnprocessableContent',
  429: 'TooManyRequests',
  500: 'InternalServerError',
  502: 'BadGateway',
  503: 'ServiceUnavailable'
}
const ERROR_ENVELOPE = '#/components/schemas/ErrorResponse'

/**
 * The error envelope at one status reads the same on every operation: it is listed once
 * under components.responses and referenced, as a hand-written document would. One an
 * operation describes in its own words (an idempotent route's 409) stays where it is.
 */
function shareErrorResponses (document: OpenApi.Document): OpenApi.Document {
  const shared: Record<string, OpenApi.ResponseObject> = {}
  for (const operations of Object.values(document.paths ?? {})) {
    for (const operation of Object.values(operations ?? {}) as OpenApi.OperationObject[]) {
      for (const [status, response] of Object.entries(operation.responses ?? {})) {
        const name = ERROR_RESPONSE_NAMES[status]
        const schema = (response as OpenApi.ResponseObject).content?.['application/json']?.schema as { $ref?: string } | undefined
        const standard = ERROR_DESCRIPTIONS[Number(status) as keyof typeof ERROR_DESCRIPTIONS]
        if (name === undefined || schema?.$ref !== ERROR_ENVELOPE || (response as OpenApi.ResponseObject).description !== standard) continue
        shared[name] ??= response as OpenApi.ResponseObject
        operation.responses![status] = { $ref: `#/components/responses/${name}` }
      }
    }
  }
  document.components = { ...document.components, responses: shared }
  return document
}

// Our ajv keyword (ErrorMessage, errors.ts), not part of the public contract.
function stripErrorMessages (value: unknown): unknown {
  if (Array.isArray(value)) return value.map(stripErrorMessages)
  if (value === null || typeof value !== 'object') return value
  return Object.fromEntries(Object.entries(value)
    .filter(([key]) => key !== 'errorMessage')
    .map(([key, inner]) => [key, stripErrorMessages(inner)]))
}

export default swagger
