// The error statuses that cross-cutting parts of the service answer are documented here,
// for every route, so the OpenAPI document cannot miss them: 400 (query strings are
// validated everywhere), 500, 503 (database not ready, load shedding, shutdown, billing not
// configured), 429 (the global rate limit), 401 and 403 on protected routes (403 with `stepUp`
// where a recent step-up is needed), and 413 and 415 where a body is parsed. A route lists only
// the statuses of its own (404, 409, 502, a public route's 401); listing one of these as well
// is refused at start-up.
import fp from 'fastify-plugin'
import { errorResponses, ref, type ErrorStatus } from '../../schemas/common.js'
import { StepUpRefusal } from '../../schemas/sessions.js'

const UNSAFE = new Set(['POST', 'PUT', 'PATCH', 'DELETE'])

export default fp(async function documentedErrors (fastify) {
  fastify.addHook('onRoute', (route) => {
    const schema = route.schema
    const methods = [route.method].flat()
    // Fastify's HEAD twin of a GET carries the GET's schema, documented already.
    if (schema === undefined || schema.hide === true || methods.every((m) => m === 'HEAD')) return
    const parsesBody = methods.some((m) => UNSAFE.has(m))
    const shared: ErrorStatus[] = [400, 500, 503]
    if (route.config?.rateLimit !== false) shared.push(429)
    if (parsesBody) shared.push(413, 415)
    const stepUp = route.config?.stepUp === true
    // 403 on every protected route: an API key where none is taken, or without the scopes; a
    // cookie from another site (unsafe methods); a stale session.
    if (route.config?.public !== true) shared.push(401, 403)
    const own = { ...(schema.response as Record<string, { description?: string }> | undefined) }
    const twice = shared.filter((status) => String(status) in own)
    if (twice.length > 0) {
      throw new Error(`${methods.join(',')} ${route.url} documents ${twice.join(', ')}, which plugins/app/documented-errors.ts adds: state each once`)
    }
    // Success responses get a description of their own instead of "Default Response".
    for (const [status, response] of Object.entries(own)) {
      if (/^2\d\d$/.test(status) && response.description === undefined) own[status] = { ...response, description: status === '201' ? 'Created' : 'OK' }
    }
    // A route that needs a recent step-up says what to do about it in its 403 (`stepUp`).
    const refusal = stepUp ? { 403: { ...ref(StepUpRefusal), description: 'Forbidden; with `STEP_UP_REQUIRED`, step up first (POST /auth/step-up)' } } : {}
    schema.response = { ...errorResponses(...shared), ...refusal, ...own }
  })
}, { name: 'documented-errors' })
