// Prometheus metrics (prom-client) at GET /metrics, for operators, never for clients: on a
// port of its own (METRICS_PORT, a second tiny HTTP server owned by this plugin), and/or on
// the main port behind a bearer token (METRICS_TOKEN). With neither there is no /metrics
// (404), no per-request hook and no default metrics: the registry still exists, so the
// plugins that own a figure (db, passwords, the webhook route) register it unconditionally.
//
// prom-client directly rather than fastify-metrics: that plugin registers its own route
// (global registry by default) and its own hooks; the separate port, the token, our route
// flags and the envelope on 401 would each need working around it. docs/operations.md lists
// what each metric means.
import { createHash, timingSafeEqual } from 'node:crypto'
import { createServer, type Server } from 'node:http'
import type { FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client'
import { UnauthorizedError } from '../../errors.js'

/** What a gauge reads when scraped: its value, or its value by label (one label). */
type Reading<L extends string> = number | undefined | (string extends L ? never : Array<{ labels: Partial<Record<L, string>>, value: number }>)

export interface GaugeSpec<L extends string = string> {
  name: string
  help: string
  labelNames?: readonly L[]
  /**
   * Called at each scrape. Undefined leaves the series as it was (never set: no series); a
   * failure (a database that does not answer) is logged at debug level and leaves the last
   * values too, and the scrape succeeds.
   */
  read: () => Reading<L> | Promise<Reading<L>>
}

export interface Metrics {
  /** Where the service's metrics live; use gauge() and counter() to add a plugin's own. */
  registry: Registry
  /** A gauge read when scraped: the one way plugins report a level (queue depths, pool sizes, up/down). */
  gauge: <L extends string = string>(spec: GaugeSpec<L>) => void
  /** A counter the plugin increments. */
  counter: <L extends string = string>(spec: { name: string, help: string, labelNames?: readonly L[] }) => Counter<L>
  /** Provider events the webhook received, by event type and outcome (applied, ignored, duplicate, failed). */
  webhookEvents: Counter<'type' | 'outcome'>
  /** The METRICS_PORT server, listening once the app is ready; null without METRICS_PORT. */
  server: Server | null
}

declare module 'fastify' {
  interface FastifyInstance {
    metrics: Metrics
  }
}

// From 1 ms (a /health answer) to 10 s (a checkout's provider calls), in seconds.
const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
const BEARER = /^Bearer[ ]+(\S+)\s*$/i

const digest = (text: string) => createHash('sha256').update(text).digest()

export default fp(async function metrics (fastify) {
  const { config } = fastify
  const registry = new Registry()
  const counter = <L extends string>(spec: { name: string, help: string, labelNames?: readonly L[] }) =>
    new Counter<L>({ ...spec, labelNames: spec.labelNames ?? [], registers: [registry] })
  const gauge = <L extends string>({ read, ...spec }: GaugeSpec<L>): void => {
    const log = fastify.log
    // eslint-disable-next-line no-new
    new Gauge<L>({
      ...spec,
      labelNames: spec.labelNames ?? [],
      registers: [registry],
      async collect () {
        let reading: Reading<L>
        try {
          reading = await read()
        } catch (err) {
          log.debug({ err }, `${spec.name}: not read`)
          return
        }
        if (typeof reading === 'number') this.set(reading)
        else if (Array.isArray(reading)) for (const { labels, value } of reading) this.set(labels, value)
      }
    })
  }
  const webhookEvents = counter({
    name: 'webhook_events_total',
    help: 'Payment provider events received with a valid signature, by type and outcome',
    labelNames: ['type', 'outcome'] as const
  })
  const served = config.metrics.port !== undefined || config.metrics.token !== undefined
  fastify.decorate('metrics', { registry, gauge, counter, webhookEvents, server: null } satisfies Metrics as Metrics)
  if (!served) return

  collectDefaultMetrics({ register: registry })
  const requests = new Counter({
    name: 'http_requests_total',
    help: 'Requests answered, by method, route pattern and status',
    labelNames: ['method', 'route', 'status_code'] as const,
    registers: [registry]
  })
  const durations = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'Time from the request\'s arrival to its answer sent, by method, route pattern and status',
    labelNames: ['method', 'route', 'status_code'] as const,
    buckets: LATENCY_BUCKETS,
    registers: [registry]
  })
  // Routes are patterns (never the raw URL), so the series stay few.
  fastify.addHook('onResponse', (request, reply, done) => {
    const labels = { method: request.method, route: request.routeOptions.url ?? '(unmatched)', status_code: String(reply.statusCode) }
    requests.inc(labels)
    durations.observe(labels, reply.elapsedTime / 1000)
    done()
  })

  if (config.metrics.token !== undefined) {
    const expected = digest(config.metrics.token)
    // Constant time: both sides are SHA-256 digests, of equal length whatever was sent.
    const authorized = (request: FastifyRequest): boolean => {
      const match = BEARER.exec(request.headers.authorization ?? '')
      return match !== null && timingSafeEqual(digest(match[1]!), expected)
    }
    fastify.get('/metrics', {
      // Scrapers are not clients: no user token, no client rate limit, answered while the
      // database is down and under pressure, not logged per scrape, not in the API document.
      config: { public: true, rateLimit: false, needsDatabase: false, shedUnderPressure: false, logRequest: false },
      schema: { hide: true },
      onRequest: async (request) => {
        if (!authorized(request)) throw new UnauthorizedError()
      }
    }, async (_request, reply) => reply.type(registry.contentType).send(await registry.metrics()))
  }

  if (config.metrics.port !== undefined) {
    const server = createServer((req, res) => {
      const path = (req.url ?? '').split('?')[0]
      if ((req.method !== 'GET' && req.method !== 'HEAD') || path !== '/metrics') {
        res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('Not found\n')
        return
      }
      registry.metrics().then((text) => {
        res.writeHead(200, { 'content-type': registry.contentType }).end(req.method === 'HEAD' ? undefined : text)
      }, (err: unknown) => {
        fastify.log.error({ err }, 'metrics scrape failed')
        res.writeHead(500).end()
      })
    })
    fastify.metrics.server = server
    fastify.addHook('onReady', () => new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(config.metrics.port, config.metrics.host, () => {
        server.off('error', reject)
        resolve()
      })
    }))
    fastify.addHook('onClose', () => new Promise<void>((resolve) => {
      if (!server.listening) return resolve()
      server.close(() => resolve())
      server.closeAllConnections()
    }))
  }
}, {
  name: 'metrics',
  // The global rate limit's onRoute hook must exist before /metrics is added, to read its rateLimit: false.
  dependencies: ['rate-limit']
})
