// One error path: every failure, whatever raised it (a handler, a hook, validation, a body
// parser, Fastify itself), becomes the envelope of schemas/errors.ts here, and 5xx internals
// stay in the log. Also the answer for unknown routes.
import type { FastifyError } from 'fastify'
import fp from 'fastify-plugin'
import { isDatabaseUnavailable } from '../db/connect.js'
import { BUSY_RETRY_AFTER_SECONDS, ERROR_CATALOG, errorBody, formatValidationDetails, isAppError, ValidationError, type ErrorCode } from '../schemas/errors.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The code of schema validation failures (default `VALIDATION_FAILED`; the login form's is `INVALID_INPUT`). */
    validationCode?: 'VALIDATION_FAILED' | 'INVALID_INPUT'
  }
}

// Fastify's own refusals, by their error code.
const fastifyClientErrors: Record<string, ErrorCode> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'UNSUPPORTED_MEDIA_TYPE',
  FST_ERR_CTP_BODY_TOO_LARGE: 'PAYLOAD_TOO_LARGE',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'INVALID_JSON',
  FST_ERR_CTP_INVALID_JSON_BODY: 'INVALID_JSON'
}

export default fp(async function errors (fastify) {
  // Registered before any other plugin or route, so every encapsulated context inherits them.
  fastify.setErrorHandler(function (err: FastifyError, request, reply) {
    const send = (code: ErrorCode, details?: string[]) => reply.code(ERROR_CATALOG[code][0]).send(errorBody(code, details))

    if (err.validation) {
      return send(request.routeOptions.config.validationCode ?? 'VALIDATION_FAILED', formatValidationDetails(err.validation, err.validationContext))
    }
    if (err instanceof ValidationError) return send(err.code, err.details)
    if (isAppError(err)) {
      // Refusals that say when to come back: rate limits carry their wait, shedding a fixed one.
      const retryAfter = (err as { retryAfter?: number }).retryAfter ?? (err.code === 'OVERLOADED' ? BUSY_RETRY_AFTER_SECONDS : undefined)
      if (retryAfter !== undefined) reply.header('retry-after', String(retryAfter))
      return send(err.code)
    }
    const known = err.code === undefined ? undefined : fastifyClientErrors[err.code]
    if (known) return send(known)
    // The JSON parsers' errors carry 400 but no code (a SyntaxError, or the raw-body parser's empty-body error).
    if (err.statusCode === 400 && (err instanceof SyntaxError || err.message.startsWith('Body cannot be empty'))) return send('INVALID_JSON')
    if (isDatabaseUnavailable(err)) {
      request.log.error({ err }, 'database unavailable')
      return send('SERVICE_UNAVAILABLE')
    }
    const status = err.statusCode ?? 500
    if (status >= 400 && status < 500) return send(status === 404 ? 'NOT_FOUND' : 'BAD_REQUEST')
    request.log.error({ err }, 'unexpected error')
    return send('INTERNAL_ERROR')
  })

  fastify.setNotFoundHandler(function (_request, reply) {
    return reply.code(404).send(errorBody('NOT_FOUND'))
  })
}, { name: 'errors' })
