// One load run with autocannon's programmatic API: a fixed duration, a warm-up first,
// non-2xx responses and socket errors/timeouts counted as errors.
import autocannon from 'autocannon'

export type Request = autocannon.Request

export interface LoadOptions {
  url: string
  connections: number
  /** Seconds. */
  duration: number
  /** Seconds of the same load before, not measured (JIT, pool connections, caches). */
  warmup?: number
  requests: Request[]
  /** Per-request timeout, seconds (default 10). */
  timeout?: number
}

export interface LoadResult {
  /** 2xx responses per second (one decimal under 100). */
  rps: number
  /** 2xx responses. */
  ok: number
  p50: number
  p90: number
  p99: number
  max: number
  /** Non-2xx responses plus socket errors and timeouts. */
  errors: number
  non2xx: number
  timeouts: number
  socketErrors: number
  responses: number
  statusCodes: Record<string, number>
  seconds: number
}

function once (options: autocannon.Options): Promise<autocannon.Result> {
  return new Promise((resolve, reject) => {
    autocannon(options, (err: unknown, result: autocannon.Result) => err ? reject(err instanceof Error ? err : new Error(String(err))) : resolve(result))
  })
}

const round = (n: number, digits = 2) => Math.round(n * 10 ** digits) / 10 ** digits

export async function runLoad (options: LoadOptions): Promise<LoadResult> {
  const base: autocannon.Options = {
    url: options.url,
    connections: options.connections,
    requests: options.requests,
    timeout: options.timeout ?? 10
  }
  if (options.warmup && options.warmup > 0) await once({ ...base, duration: options.warmup })
  const result = await once({ ...base, duration: options.duration })
  const statusCodes: Record<string, number> = {}
  for (const [code, stat] of Object.entries(result.statusCodeStats ?? {})) statusCodes[code] = stat.count ?? 0
  const ok = result['2xx']
  const seconds = result.duration || options.duration
  return {
    rps: ok / seconds < 100 ? Math.round(10 * ok / seconds) / 10 : Math.round(ok / seconds),
    ok,
    p50: round(result.latency.p50),
    p90: round(result.latency.p90),
    p99: round(result.latency.p99),
    max: round(result.latency.max),
    errors: result.non2xx + result.errors,
    non2xx: result.non2xx,
    timeouts: result.timeouts,
    socketErrors: result.errors - result.timeouts,
    responses: result.requests.total,
    statusCodes,
    seconds
  }
}
