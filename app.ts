// The service as a Fastify plugin: plugins/external → plugins/app → routes, one error
// handler and one not-found handler. server.ts and the tests build it the same way,
// from serverOptions() and a loaded configuration.
import { randomUUID } from 'node:crypto'
import type { IncomingMessage } from 'node:http'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { AjvCompiler } from '@fastify/ajv-compiler'
import autoload from '@fastify/autoload'
import { LogController, type FastifyError, type FastifyInstance, type FastifyServerOptions } from 'fastify'
import responseHeaders from './plugins/response-headers.js'
import { trustProxy, type AppConfig } from './schemas/config.js'
import { isDatabaseUnavailable } from './db/connect.js'
import { BUSY_RETRY_AFTER_SECONDS, ERROR_CATALOG, errorBody, formatValidationDetails, isAppError, ValidationError, type ErrorCode } from './schemas/errors.js'

declare module 'fastify' {
  interface FastifyInstance {
    config: AppConfig
  }
  interface FastifyContextConfig {
    /** The code of schema validation failures (default `VALIDATION_FAILED`; the login form's is `INVALID_INPUT`). */
    validationCode?: 'VALIDATION_FAILED' | 'INVALID_INPUT'
    /** false: no per-request log line (health checks). */
    logRequest?: boolean
  }
}

export interface AppOptions {
  config: AppConfig
}

const dirname = path.dirname(fileURLToPath(import.meta.url))
const REQUEST_ID = /^[\w.:-]{1,128}$/
export const BODY_LIMIT = 1024 * 1024

/** What must never reach a log line. */
export const REDACTED_PATHS = [
  'req.headers.authorization', 'req.headers.cookie', 'req.headers["stripe-signature"]',
  'res.headers["set-cookie"]', 'headers.authorization', 'headers.cookie',
  'password', 'currentPassword', 'newPassword', '*.password', '*.currentPassword', '*.newPassword',
  'token', '*.token', 'secret', '*.secret', 'apiKey', '*.apiKey'
]

const AJV_OPTIONS = {
  // Unknown fields are refused, not silently dropped (decisions.md).
  removeAdditional: false,
  useDefaults: true,
  allErrors: true,
  // parentSchema on errors, so our `errorMessage` keyword can be read back.
  verbose: true,
  keywords: ['errorMessage']
}
const buildValidator = AjvCompiler()

/**
 * Pretty lines in development, JSON on stdout otherwise (no worker thread: the fastest
 * path); with LOG_TOKEN and LOG_DATASET also shipped to that Axiom dataset.
 */
function logTransport (config: AppConfig): { transport?: { targets: Array<{ target: string, level: string, options: object }> } } {
  const level = config.LOG_LEVEL
  const targets = []
  if (config.LOG_TOKEN && config.LOG_DATASET) {
    targets.push({
      target: '@axiomhq/pino',
      level,
      options: { dataset: config.LOG_DATASET, token: config.LOG_TOKEN, ...(config.LOG_URL && { url: config.LOG_URL }) }
    })
  }
  if (config.NODE_ENV === 'development') {
    targets.push({ target: 'pino-pretty', level, options: { translateTime: 'HH:MM:ss.l', ignore: 'pid,hostname' } })
  } else if (targets.length > 0) {
    targets.push({ target: 'pino/file', level, options: { destination: 1 } })
  }
  return targets.length > 0 ? { transport: { targets } } : {}
}

export function serverOptions (config: AppConfig): FastifyServerOptions {
  return {
    logger: {
      level: config.LOG_LEVEL,
      redact: { paths: REDACTED_PATHS, censor: '[redacted]' },
      ...logTransport(config)
    },
    // One line per request comes from plugins/app/request-log.ts instead.
    logController: new LogController({ disableRequestLogging: true, requestIdLogLabel: 'reqId' }),
    bodyLimit: BODY_LIMIT,
    // A hop count is valid at run time; the typings omit it.
    trustProxy: trustProxy(config) as boolean | string[],
    // During shutdown plugins/app/graceful-close.ts answers new requests with the 503 envelope.
    return503OnClosing: false,
    // Opening a new embedded database and migrating it can take a while on a busy machine.
    pluginTimeout: 60_000,
    genReqId: (req: IncomingMessage) => {
      const given = req.headers['x-request-id']
      return typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID()
    },
    schemaController: {
      compilersFactory: {
        // Query strings and path params arrive as text and are coerced ("5" → 5); JSON
        // bodies are typed already and validated as sent: `null` or "true" for a boolean
        // is a 400, not a silent false or true.
        buildValidator: ((externalSchemas) => {
          const strict = buildValidator(externalSchemas, { customOptions: { ...AJV_OPTIONS, coerceTypes: false } })
          const coercing = buildValidator(externalSchemas, { customOptions: { ...AJV_OPTIONS, coerceTypes: 'array' } })
          // Fastify calls the compiler with the route definition (its typings say a bare schema).
          type Compile = (route: { httpPart?: string }) => ReturnType<typeof strict>
          const compileStrict = strict as unknown as Compile
          const compileCoercing = coercing as unknown as Compile
          return ((route: { httpPart?: string }) => route.httpPart === 'body' ? compileStrict(route) : compileCoercing(route)) as unknown as typeof strict
        }) satisfies typeof buildValidator
      }
    },
    routerOptions: { maxParamLength: 200 }
  }
}

// Iterative: a hostile body can nest deeper than the call stack.
function containsNul (root: unknown): boolean {
  const pending = [root]
  while (pending.length > 0) {
    const value = pending.pop()
    if (typeof value === 'string') {
      if (value.includes('\0')) return true
    } else if (value !== null && typeof value === 'object') {
      for (const [key, inner] of Object.entries(value)) {
        if (key.includes('\0')) return true
        pending.push(inner)
      }
    }
  }
  return false
}

const isEmptyJson = (value: unknown): boolean =>
  value === null || (typeof value === 'object' && !Array.isArray(value) && Object.keys(value as object).length === 0)

// Fastify's own refusals, by their error code.
const fastifyClientErrors: Record<string, ErrorCode> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'UNSUPPORTED_MEDIA_TYPE',
  FST_ERR_CTP_BODY_TOO_LARGE: 'PAYLOAD_TOO_LARGE',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'INVALID_JSON',
  FST_ERR_CTP_INVALID_JSON_BODY: 'INVALID_JSON'
}

export default async function serviceApp (fastify: FastifyInstance, opts: AppOptions) {
  fastify.decorate('config', opts.config)

  // Set before any plugin or route, so every encapsulated context inherits them.
  fastify.setErrorHandler(function (err: FastifyError, request, reply) {
    const send = (code: ErrorCode, details?: string[]) => reply.code(ERROR_CATALOG[code][0]).send(errorBody(code, details))

    if (err.validation) {
      return send(request.routeOptions.config.validationCode ?? 'VALIDATION_FAILED', formatValidationDetails(err.validation, err.validationContext))
    }
    if (err instanceof ValidationError) return send(err.code, err.details)
    if (isAppError(err)) {
      if (err.code === 'OVERLOADED') reply.header('retry-after', String(BUSY_RETRY_AFTER_SECONDS))
      return send(err.code)
    }
    const known = err.code === undefined ? undefined : fastifyClientErrors[err.code]
    if (known) return send(known)
    // The JSON parsers' errors carry 400 but no code (a SyntaxError, or the raw-body parser's empty-body error).
    if (err.statusCode === 400 && (err instanceof SyntaxError || err.message.startsWith('Body cannot be empty'))) return send('INVALID_JSON')
    if (isDatabaseUnavailable(err)) {
      request.log.error({ err: { message: err.message, code: err.code } }, 'database unavailable')
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

  // JSON only: a text/plain body on a JSON route is a 415, not a string handed to validation.
  fastify.removeContentTypeParser('text/plain')
  // PostgreSQL text cannot hold NUL: refuse it at the door (400) rather than fail in SQL (500).
  // The string check is cheap; the walk only runs when the body mentions \u0000.
  const parseJson = fastify.getDefaultJsonParser('error', 'error')
  fastify.removeContentTypeParser('application/json')
  fastify.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const text = body as string
    // Browser fetch wrappers send `Content-Type: application/json` on body-less calls too
    // (sign-out, deletes): on a route that takes no body, an empty body is no body. Any
    // other body there is refused rather than silently ignored; `{}` and `null` say nothing.
    // An unknown route answers 404 whatever its body.
    if (request.is404) return done(null, undefined)
    const bodyless = request.routeOptions.schema?.body === undefined
    if (bodyless && text.trim() === '') return done(null, undefined)
    parseJson(request, text, (err: Error | null, value?: unknown) => {
      if (err) return done(err)
      if (bodyless) return isEmptyJson(value) ? done(null, undefined) : done(new ValidationError(['This operation takes no body - body']))
      if (text.includes('\\u0000') && containsNul(value)) return done(new ValidationError(['Must not contain NUL characters - body']))
      done(null, value)
    })
  })

  // First, so its onRequest hook runs before any plugin's and every answer carries its headers.
  await fastify.register(responseHeaders)
  // Plugins read fastify.config themselves; `options: {}` is what autoload needs for autoConfig functions.
  await fastify.register(autoload, { dir: path.join(dirname, 'plugins/external'), options: {} })
  await fastify.register(autoload, { dir: path.join(dirname, 'plugins/app'), options: {}, ignorePattern: /\.worker\.[jt]s$/ })
  await fastify.register(autoload, { dir: path.join(dirname, 'routes'), options: {} })
}
