// The options the Fastify server is built with: the HTTP server and its timeouts and
// connection cap, logging, body and router limits, request ids, proxies. server.ts, the
// tests and the OpenAPI generator all build the app with these.
import { randomUUID } from 'node:crypto'
import { createServer, type IncomingMessage, type Server } from 'node:http'
import { AjvCompiler } from '@fastify/ajv-compiler'
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler'
import { LogController, type FastifyBaseLogger, type FastifyHttpOptions, type FastifyServerFactoryHandler } from 'fastify'
import type { Bindings, Level, Logger } from 'pino'
import { clientErrorHandler, frameworkErrors } from './plugins/errors.js'
import { clientKey } from './client-address.js'
import { trustProxy, type AppConfig, type TrustProxy } from './config.js'
import { MAX_LOGGED_TEXT } from './errors.js'

const REQUEST_ID = /^[\w.:-]{1,128}$/
export const BODY_LIMIT = 1024 * 1024

/** What must never reach a log line. */
export const REDACTED_PATHS = [
  'req.headers.authorization', 'req.headers.cookie', 'req.headers["stripe-signature"]',
  'res.headers["set-cookie"]', 'headers.authorization', 'headers.cookie',
  'password', 'currentPassword', 'newPassword', '*.password', '*.currentPassword', '*.newPassword',
  'token', '*.token', 'secret', '*.secret', 'apiKey', '*.apiKey'
]

/** pino-pretty is a development dependency: absent from a production install. */
function installed (name: string): boolean {
  try {
    import.meta.resolve(name)
    return true
  } catch {
    return false
  }
}

/**
 * Pretty lines in development (when pino-pretty is installed), JSON on stdout otherwise
 * (no worker thread: the fastest path); with LOG_TOKEN and LOG_DATASET also shipped to
 * that Axiom dataset.
 */
function logTransport (config: AppConfig): { transport?: { targets: Array<{ target: string, level: string, options: object }> } } {
  const level = config.log.level
  const targets = []
  if (config.log.axiomToken && config.log.axiomDataset) {
    targets.push({
      target: '@axiomhq/pino',
      level,
      options: { dataset: config.log.axiomDataset, token: config.log.axiomToken, ...(config.log.axiomUrl && { url: config.log.axiomUrl }) }
    })
  }
  if (config.nodeEnv === 'development' && installed('pino-pretty')) {
    targets.push({ target: 'pino-pretty', level, options: { translateTime: 'HH:MM:ss.l', ignore: 'pid,hostname' } })
  } else if (targets.length > 0) {
    targets.push({ target: 'pino/file', level, options: { destination: 1 } })
  }
  return targets.length > 0 ? { transport: { targets } } : {}
}

/**
 * A request's logger, which Fastify makes for every request: pino's child, whose making
 * serializes and redacts its bindings (the request id), is made by the first line written at
 * a level the logger writes, or by the first child or level change asked of it. At
 * `LOG_LEVEL=warn` most requests write nothing, and making the child was ~5 % of a `/health`'s
 * CPU (issue 34). Its lines are the child's, request id and all.
 */
class RequestLogger implements FastifyBaseLogger {
  #child: Logger | undefined
  #bindings: Bindings
  constructor (private readonly parent: Logger, bindings: Bindings) {
    this.#bindings = bindings
  }

  #made (): Logger {
    return (this.#child ??= this.parent.child(this.#bindings))
  }

  /** As pino's: bindings added to this logger in place (plugins/tracing.ts adds the trace's ids). */
  setBindings (bindings: Bindings): void {
    if (this.#child === undefined) this.#bindings = { ...this.#bindings, ...bindings }
    else this.#child.setBindings(bindings)
  }

  #write (level: Level, args: unknown[]): void {
    if (!(this.#child ?? this.parent).isLevelEnabled(level)) return
    const child = this.#made()
    Reflect.apply(child[level], child, args)
  }

  get level (): string {
    return (this.#child ?? this.parent).level
  }

  set level (level: string) {
    this.#made().level = level
  }

  fatal (...args: unknown[]): void { this.#write('fatal', args) }
  error (...args: unknown[]): void { this.#write('error', args) }
  warn (...args: unknown[]): void { this.#write('warn', args) }
  info (...args: unknown[]): void { this.#write('info', args) }
  debug (...args: unknown[]): void { this.#write('debug', args) }
  trace (...args: unknown[]): void { this.#write('trace', args) }
  silent (): void {}

  child (bindings: Bindings, options?: object): FastifyBaseLogger {
    return this.#made().child(bindings, options)
  }
}

/** Fastify's factory of request loggers: a route's own log level or serializers get pino's child at once. */
const requestLogger: NonNullable<FastifyHttpOptions<Server>['childLoggerFactory']> = (logger, bindings, options) =>
  Object.keys(options).length > 0 ? logger.child(bindings, options) : new RequestLogger(logger as Logger, bindings)

const clip = (text: string | undefined): string =>
  text === undefined ? '' : text.length <= MAX_LOGGED_TEXT ? text : `${text.slice(0, MAX_LOGGED_TEXT)}… (${text.length} characters)`

/**
 * Errors in the log: type, code, message and stack, each clipped. A database error can
 * repeat a megabyte of the request's input in its message (and so again in its stack) and
 * in fields such as `detail`, which are left out.
 */
export function serializeError (err: Error & { code?: unknown }): { type: string, code: unknown, message: string, stack: string } {
  return { type: err.constructor?.name ?? 'Error', code: err.code, message: clip(err.message), stack: clip(err.stack) }
}

/**
 * Closes a connection at once when its peer already holds `max` (counted by clientKey, so an
 * IPv6 /64 is one peer); the trusted proxies, which carry every client's connections, are
 * not counted. The check is a map lookup per accepted connection, none per request.
 */
export function limitConnectionsPerAddress (server: Server, max: number, isProxy: TrustProxy | false): void {
  const open = new Map<string, number>()
  // Before the HTTP server's own listener: a refused socket never gets a parser.
  server.prependListener('connection', (socket) => {
    const address = socket.remoteAddress
    if (address === undefined || (isProxy !== false && isProxy(address, 0))) return
    const key = clientKey(address)
    const count = (open.get(key) ?? 0) + 1
    if (count > max) {
      socket.destroy()
      return
    }
    open.set(key, count)
    socket.once('close', () => {
      const left = open.get(key)! - 1
      if (left === 0) open.delete(key)
      else open.set(key, left)
    })
  })
}

/**
 * The HTTP server, with every request's time, the number of connections and each peer's
 * share of them bounded (config.ts says why each default). Fastify's own timeout options cannot set a
 * connection cap or how often Node checks request timeouts (every 30 s by default, so a
 * 1 s limit would cut at up to 31 s): here it checks ten times per limit, at most every
 * second, a timer over the connections still receiving a request, not a per-request cost.
 * Headers are due within the request timeout (Node refuses a longer headers timeout).
 */
export function httpServer (config: AppConfig): (handler: FastifyServerFactoryHandler) => Server {
  return (handler) => {
    const server = createServer({
      requestTimeout: config.http.requestTimeoutMs,
      headersTimeout: config.http.requestTimeoutMs,
      connectionsCheckingInterval: Math.min(1000, Math.ceil(config.http.requestTimeoutMs / 10))
    }, handler)
    server.keepAliveTimeout = config.http.keepAliveTimeoutMs
    server.setTimeout(config.http.connectionTimeoutMs)
    server.maxConnections = config.http.maxConnections
    limitConnectionsPerAddress(server, config.http.maxConnectionsPerAddress, trustProxy(config))
    return server
  }
}

type BuildSerializer = ReturnType<typeof SerializerSelector>
type Serializer = ReturnType<ReturnType<BuildSerializer>>

/**
 * Fastify's response serializers, compiled once per distinct schema rather than once per
 * route and status, and each only when first used: every route documents the same error envelopes, and at 39 routes that
 * was 372 compilations of 48 distinct schemas, the largest part of start-up after loading
 * modules (issue 30). A serializer is a pure function of its schema, the serializer options
 * and the shared schemas it may reference: the cache's key.
 */
export function serializersOncePerSchema (): BuildSerializer {
  const select = SerializerSelector()
  const built = new Map<string, Serializer>()
  // Each shared schema by identity: contexts share the root's objects; one that adds its own
  // (even under an $id another context uses) gets keys of its own.
  const ids = new WeakMap<object, number>()
  let lastId = 0
  const idOf = (schema: object) => {
    let id = ids.get(schema)
    if (id === undefined) ids.set(schema, id = ++lastId)
    return id
  }
  return (externalSchemas, serializerOpts) => {
    const compile = select(externalSchemas, serializerOpts)
    const shared = Object.values(externalSchemas as Record<string, object>).map(idOf).join(' ')
    const context = `${shared}\n${JSON.stringify(serializerOpts ?? {})}`
    return (route) => {
      const key = `${context}\n${JSON.stringify(route.schema)}`
      let serializer = built.get(key)
      if (serializer === undefined) {
        // Compiled on its first answer (issue 34: start-up), like the validators (plugins/validation.ts).
        let compiled: Serializer | undefined
        serializer = (data) => (compiled ??= compile(route))(data)
        built.set(key, serializer)
      }
      return serializer
    }
  }
}

export function serverOptions (config: AppConfig): FastifyHttpOptions<Server> {
  return {
    schemaController: {
      compilersFactory: {
        buildSerializer: serializersOncePerSchema(),
        // Fastify's own default (plugins/validation.ts replaces it for every route), given here
        // so that it comes from dist/vendor with ajv (scripts/vendor.ts), not as Fastify would
        // require it: its ajv's 83 files, loaded on every start (issue 34).
        buildValidator: AjvCompiler()
      }
    },
    // Also what the tests listen on: helper.ts builds the app from these options.
    serverFactory: httpServer(config),
    logger: {
      level: config.log.level,
      redact: { paths: REDACTED_PATHS, censor: '[redacted]' },
      serializers: { err: serializeError },
      ...logTransport(config)
    },
    // One line per request comes from plugins/app/request-log.ts instead.
    logController: new LogController({ disableRequestLogging: true, requestIdLogLabel: 'reqId' }),
    childLoggerFactory: requestLogger,
    bodyLimit: BODY_LIMIT,
    trustProxy: trustProxy(config),
    // During shutdown plugins/app/graceful-close.ts answers new requests with the 503 envelope.
    return503OnClosing: false,
    // Opening a new embedded database and migrating it can take a while on a busy machine.
    pluginTimeout: 60_000,
    genReqId: (req: IncomingMessage) => {
      const given = req.headers['x-request-id']
      return typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID()
    },
    routerOptions: { maxParamLength: 200 },
    // What is refused before any route or hook runs is answered in the envelope too.
    frameworkErrors,
    clientErrorHandler
  }
}
