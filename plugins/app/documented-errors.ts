// Every route documents the errors that cross-cutting parts of the service can answer
// with, whatever its own schema lists, so the OpenAPI document cannot miss them:
// 503 (database not ready, load shedding, shutdown), 500, 400 (query strings), 429 (global
// rate limit), and for unsafe methods 413/415 (the body parser runs before any handler).
import fp from 'fastify-plugin'
import { errorResponses, type ErrorStatus } from '../../schemas/common.js'

const UNSAFE = new Set(['POST', 'PUT', 'PATCH', 'DELETE'])

export default fp(async function documentedErrors (fastify) {
  fastify.addHook('onRoute', (route) => {
    const schema = route.schema
    if (schema === undefined || schema.hide === true) return
    // 400: every route validates its query string (one without parameters refuses any).
    const statuses: ErrorStatus[] = [400, 503]
    if (route.config?.rateLimit !== false) statuses.push(429)
    const methods = [route.method].flat()
    if (methods.some((m) => UNSAFE.has(m))) statuses.push(413, 415)
    if (route.config?.public !== true) {
      statuses.push(401)
      if (methods.some((m) => UNSAFE.has(m))) statuses.push(403)
    }
    const own = { ...(schema.response as Record<string, { description?: string }> | undefined) }
    // Success responses get a description of their own instead of "Default Response".
    for (const [status, response] of Object.entries(own)) {
      if (/^2\d\d$/.test(status) && response.description === undefined) own[status] = { ...response, description: status === '201' ? 'Created' : 'OK' }
    }
    schema.response = { ...errorResponses(...statuses), ...own }
  })
}, { name: 'documented-errors' })
