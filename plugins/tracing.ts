// Traces (OpenTelemetry), on when an OTLP endpoint is configured (config.ts, tracing.endpoint):
// a span per request, opened by @fastify/otel, child spans for database queries
// (db/engine/query-spans.ts) and payment provider calls (billing/stripe-provider.ts), a caller's
// `traceparent` honoured, and the trace and span ids on every log line of the request. app.ts
// registers it before anything else, so every hook and route is added after its own.
//
// Off, it costs nothing: the SDK is never imported, no hook is added, fastify.tracerProvider is
// undefined and the database and the provider calls run unwrapped.
//
// Routes that write no per-request log line (probes, /metrics scrapes) are not traced either:
// a balancer's checks would otherwise be most of the spans.
import type {} from '@fastify/otel'
import type { TracerProvider } from '@opentelemetry/api'
import type { FastifyBaseLogger } from 'fastify'
import fp from 'fastify-plugin'

declare module 'fastify' {
  interface FastifyInstance {
    /** Where the service's own spans start, each module's under its name; undefined when tracing is off. */
    tracerProvider: TracerProvider | undefined
  }
}

/** A request's logger (server-options.ts's RequestLogger, or pino's child) can add bindings in place. */
type PinoLogger = FastifyBaseLogger & { setBindings: (bindings: Record<string, string>) => void }

export default fp(async function tracing (fastify) {
  const endpoint = fastify.config.tracing.endpoint
  if (endpoint === undefined) {
    fastify.decorate('tracerProvider', undefined)
    return
  }
  const { startTracing } = await import('../tracing/sdk.js')
  const tracing = startTracing({ endpoint, serviceName: fastify.config.tracing.serviceName })
  fastify.decorate('tracerProvider', tracing.tracerProvider)
  fastify.addHook('onRoute', (route) => {
    if (route.config?.logRequest === false) route.config = { ...route.config, otel: false }
  })
  await fastify.register(tracing.plugin)
  // After @fastify/otel's own onRequest hook, which opened the span. The request's logger is
  // its own child (Fastify's, carrying reqId), shared with the reply: bound once here, every
  // later line of the request carries the ids.
  fastify.addHook('onRequest', (request, _reply, done) => {
    const span = request.opentelemetry().span
    if (span !== null && span !== undefined) {
      const { traceId, spanId } = span.spanContext()
      ;(request.log as PinoLogger).setBindings({ trace_id: traceId, span_id: spanId })
    }
    done()
  })
  fastify.addHook('onClose', () => tracing.shutdown())
}, { name: 'tracing' })
