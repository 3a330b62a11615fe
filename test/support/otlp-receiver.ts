// An OTLP/HTTP receiver for traces, taking the JSON bodies @opentelemetry/exporter-trace-otlp-http
// sends: what a collector would be told, with no collector installed. Each span is kept with
// its attributes, its resource's and its instrumentation scope's name, as plain values.
import { once } from 'node:events'
import { createServer, type IncomingMessage } from 'node:http'

interface AnyValue { stringValue?: string, intValue?: number | string, boolValue?: boolean, doubleValue?: number }
interface KeyValue { key: string, value: AnyValue }
interface OtlpSpan {
  traceId: string
  spanId: string
  parentSpanId?: string
  name: string
  kind: number
  startTimeUnixNano: string | number
  endTimeUnixNano: string | number
  attributes?: KeyValue[]
  status?: { code?: number }
}
interface OtlpExport {
  resourceSpans: Array<{ resource: { attributes: KeyValue[] }, scopeSpans: Array<{ scope?: { name?: string }, spans: OtlpSpan[] }> }>
}

/** A span as received. */
export interface ReceivedSpan {
  traceId: string
  spanId: string
  parentSpanId: string
  name: string
  kind: number
  /** Nanoseconds since the epoch. */
  start: bigint
  end: bigint
  status: number
  attributes: Record<string, unknown>
  resource: Record<string, unknown>
  /** The instrumentation scope that made it. */
  scope: string
}

export const SPAN_KIND = { SERVER: 2, CLIENT: 3 } as const

const plain = (value: AnyValue): unknown =>
  value.stringValue ?? (value.intValue !== undefined ? Number(value.intValue) : value.boolValue ?? value.doubleValue)
const attributes = (list: KeyValue[] = []) => Object.fromEntries(list.map(({ key, value }) => [key, plain(value)]))

export async function startOtlpReceiver (t: { teardown: (fn: () => unknown) => void }) {
  const spans: ReceivedSpan[] = []
  const bodies: string[] = []
  const server = createServer((req: IncomingMessage, res) => {
    let text = ''
    req.setEncoding('utf8')
    req.on('data', (chunk: string) => { text += chunk })
    req.on('end', () => {
      if (req.method !== 'POST' || req.url !== '/v1/traces' || req.headers['content-type'] !== 'application/json') {
        res.writeHead(404).end()
        return
      }
      bodies.push(text)
      for (const { resource, scopeSpans } of (JSON.parse(text) as OtlpExport).resourceSpans) {
        for (const { scope, spans: list } of scopeSpans) {
          for (const span of list) {
            spans.push({
              traceId: span.traceId,
              spanId: span.spanId,
              parentSpanId: span.parentSpanId ?? '',
              name: span.name,
              kind: span.kind,
              start: BigInt(span.startTimeUnixNano),
              end: BigInt(span.endTimeUnixNano),
              status: span.status?.code ?? 0,
              attributes: attributes(span.attributes),
              resource: attributes(resource.attributes),
              scope: scope?.name ?? ''
            })
          }
        }
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => new Promise((resolve) => server.close(resolve)))
  const { port } = server.address() as { port: number }
  return { url: `http://127.0.0.1:${port}`, spans, bodies }
}
