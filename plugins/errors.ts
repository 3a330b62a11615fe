// One error path: every failure, whatever raised it (a handler, a hook, validation, a body
// parser, Fastify itself), becomes the envelope of errors.ts here, and 5xx internals
// stay in the log. Also the answer for unknown routes, and (as server options, see
// server-options.ts) for what is refused before any route or hook runs: the router's
// undecodable or over-long paths and Node's HTTP parser errors and request timeouts.
import { randomUUID } from 'node:crypto'
import { STATUS_CODES } from 'node:http'
import type { Socket } from 'node:net'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { isDatabaseUnavailable } from '../db/engine/connect.js'
import { BUSY_RETRY_AFTER_SECONDS, ERROR_CATALOG, errorBody, formatValidationDetails, isAppError, ValidationError, type ErrorCode, type StepUpChallenge } from '../errors.js'
import { SECURITY_HEADERS } from './response-headers.js'

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
    const send = (code: ErrorCode, details?: string[], extra?: { stepUp?: StepUpChallenge }) => reply.code(ERROR_CATALOG[code][0]).send(errorBody(code, details, extra))

    if (err.validation) {
      return send(request.routeOptions.config.validationCode ?? 'VALIDATION_FAILED', formatValidationDetails(err.validation, err.validationContext))
    }
    if (err instanceof ValidationError) return send(err.code, err.details)
    if (isAppError(err)) {
      // Refusals that say when to come back: rate limits carry their wait, shedding a fixed one.
      const retryAfter = (err as { retryAfter?: number }).retryAfter ?? (err.code === 'OVERLOADED' ? BUSY_RETRY_AFTER_SECONDS : undefined)
      if (retryAfter !== undefined) reply.header('retry-after', String(retryAfter))
      return send(err.code, undefined, { stepUp: (err as { stepUp?: StepUpChallenge }).stepUp })
    }
    const known = err.code === undefined ? undefined : fastifyClientErrors[err.code]
    if (known) return send(known)
    // The JSON parser's errors carry 400 but no code: a SyntaxError.
    if (err.statusCode === 400 && err instanceof SyntaxError) return send('INVALID_JSON')
    // The body stopped mid-way because the connection closed (the client left, or a request
    // timeout cut it and clientErrorHandler answered): no one to answer, and no database
    // failure, whatever its ECONNRESET says.
    if (err.code === 'ECONNRESET' && request.raw.destroyed) {
      request.log.info({ reason: err.message }, 'connection closed before the request arrived')
      return send('BAD_REQUEST')
    }
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

/**
 * Fastify's `frameworkErrors`: the router's refusals, which run no hook (so not the
 * security headers' either) and by default echo the path. A path parameter over
 * `maxParamLength` is 414, a path that does not decode is 400.
 */
export function frameworkErrors (err: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  const code: ErrorCode = err.code === 'FST_ERR_MAX_PARAM_LENGTH' ? 'URI_TOO_LONG' : err.code === 'FST_ERR_BAD_URL' ? 'BAD_REQUEST' : 'INTERNAL_ERROR'
  if (code === 'INTERNAL_ERROR') request.log.error({ err }, 'unexpected router error')
  reply.code(ERROR_CATALOG[code][0]).headers(SECURITY_HEADERS).header('x-request-id', request.id).send(errorBody(code))
}

// Node's HTTP parser errors and request timeouts, by their error code; anything else the
// parser refuses is a 400.
const clientErrorCodes: Record<string, ErrorCode> = {
  ERR_HTTP_REQUEST_TIMEOUT: 'REQUEST_TIMEOUT',
  HPE_HEADER_OVERFLOW: 'HEADERS_TOO_LARGE',
  HPE_CHUNK_EXTENSIONS_OVERFLOW: 'PAYLOAD_TOO_LARGE'
}

// Fixed at start-up: everything but the request id, which goes last.
const rawAnswerHead = (code: ErrorCode): { head: string, body: string } => {
  const [status] = ERROR_CATALOG[code]
  const body = JSON.stringify(errorBody(code))
  const headers = { 'content-type': 'application/json; charset=utf-8', 'content-length': String(Buffer.byteLength(body)), connection: 'close', ...SECURITY_HEADERS }
  return { head: `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\n${Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`).join('')}`, body }
}
const rawAnswers = new Map<ErrorCode, { head: string, body: string }>(
  (['BAD_REQUEST', ...Object.values(clientErrorCodes)] as ErrorCode[]).map((code) => [code, rawAnswerHead(code)])
)

/**
 * Fastify's `clientErrorHandler`: Node's HTTP parser errors (431 headers too large, 400
 * malformed) and request timeouts (408), which come before there is a request or a reply,
 * so the answer is written on the socket. Like Node's own default, it is written only when
 * no answer has begun on the connection (a response half sent cannot be followed by
 * another), and the connection is closed. The request is never echoed nor logged: the
 * error carries the raw bytes it failed on, credentials included.
 */
export function clientErrorHandler (this: FastifyInstance, err: Error & { code?: string }, socket: Socket): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) {
    socket.destroy()
    return
  }
  const code = clientErrorCodes[err.code ?? ''] ?? 'BAD_REQUEST'
  const reqId = randomUUID()
  this.log.info({ reqId, status: ERROR_CATALOG[code][0], code, reason: err.code }, 'request refused by the HTTP parser')
  const inFlight = (socket as Socket & { _httpMessage?: { headersSent: boolean } | null })._httpMessage
  if (socket.writable && !inFlight?.headersSent) {
    const { head, body } = rawAnswers.get(code)!
    socket.write(`${head}x-request-id: ${reqId}\r\n\r\n${body}`)
  }
  socket.destroy()
}
