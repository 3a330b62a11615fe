// The OpenTelemetry SDK, started by plugins/tracing.ts only when an OTLP endpoint is set (this
// module is imported then, and only then): a tracer provider whose spans are batched and sent
// over OTLP/HTTP as JSON, W3C Trace Context read from incoming requests, the context carried
// across awaits by AsyncLocalStorage, and @fastify/otel, Fastify's own instrumentation, for the
// span of each request.
import { randomUUID } from 'node:crypto'
import { context, propagation, type TracerProvider as TracerProviderApi } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { W3CTraceContextPropagator } from '@opentelemetry/core'
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http'
import { detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources'
import { BatchSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace'
import { ATTR_SERVICE_INSTANCE_ID, ATTR_SERVICE_NAME, ATTR_URL_PATH } from '@opentelemetry/semantic-conventions'
import { FastifyOtelInstrumentation } from '@fastify/otel'
import type { FastifyPluginCallback } from 'fastify'
import { MAX_LOGGED_TEXT } from '../errors.js'

export interface TracingOptions {
  /** The OTLP/HTTP traces URL (…/v1/traces). */
  endpoint: string
  serviceName: string
}

export interface Tracing {
  /**
   * Where the service's own spans (database statements, provider calls) start: each module
   * that makes spans takes its tracer here under its own name, the spans' instrumentation scope.
   */
  tracerProvider: TracerProviderApi
  /** @fastify/otel's plugin: registered before any route or hook, it opens a span per request. */
  plugin: FastifyPluginCallback
  /** Sends the spans still batched and stops. */
  shutdown: () => Promise<void>
}

// Process-wide, and the same for every app in it: set once, never taken back (a test process
// builds many apps; the API refuses a second registration anyway).
let contextReady = false
function useAsyncContext (): void {
  if (contextReady) return
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())
  propagation.setGlobalPropagator(new W3CTraceContextPropagator())
  contextReady = true
}

export function startTracing (options: TracingOptions): Tracing {
  useAsyncContext()
  // OTEL_RESOURCE_ATTRIBUTES (service.version, deployment.environment.name, …) as any
  // OpenTelemetry SDK reads it; each instance its own id, so spans tell a fleet's instances apart.
  const resource = detectResources({ detectors: [envDetector] }).merge(resourceFromAttributes({
    [ATTR_SERVICE_NAME]: options.serviceName,
    [ATTR_SERVICE_INSTANCE_ID]: randomUUID()
  }))
  // The exporter reads OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT and _COMPRESSION itself.
  const provider = new TracerProvider({
    resource,
    spanLimits: { attributeValueLengthLimit: MAX_LOGGED_TEXT },
    spanProcessors: [new BatchSpanProcessor({ exporter: new OTLPTraceExporter({ url: options.endpoint }) })]
  })
  const instrumentation = new FastifyOtelInstrumentation({
    // The request span and the service's own spans only: a span per hook (a dozen per request)
    // or around the handler would say little a request's database and provider spans do not.
    instrumentHooks: false,
    instrumentHandler: false,
    // An error's message and stack are in its log line, which carries the trace id; user input
    // quoted by an error message stays out of the traces.
    recordExceptions: false,
    requestHook: (span, request) => {
      const route = request.routeOptions.url
      span.updateName(route === undefined ? request.method : `${request.method} ${route}`)
      // The path alone: a query string may carry a token (a verification or reset link).
      const query = request.url.indexOf('?')
      if (query !== -1) span.setAttribute(ATTR_URL_PATH, request.url.slice(0, query))
    }
  })
  instrumentation.setTracerProvider(provider)
  return {
    tracerProvider: provider,
    plugin: instrumentation.plugin(),
    shutdown: async () => {
      instrumentation.disable()
      await provider.shutdown()
    }
  }
}
