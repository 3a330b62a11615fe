// One load run with autocannon's programmatic API: a fixed duration, a warm-up first,
// non-2xx responses and socket errors/timeouts counted as errors. Latency percentiles come
// from every 2xx response's own time (autocannon measures it with hrtime, in fractional
// milliseconds, but its histogram keeps whole milliseconds: useless for sub-millisecond
// routes, and so is a p99/p50 ratio taken from it).
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
  /** Latencies of the 2xx responses, milliseconds (three significant digits). */
  p50: number
  p90: number
  p99: number
  max: number
  /** Non-2xx responses plus socket errors and timeouts. */
  errors: number
  non2xx: number
  /** Latencies of the non-2xx responses (e.g. a quick 503 when a queue is full), ms. */
  non2xxP50: number
  non2xxP99: number
  timeouts: number
  socketErrors: number
  responses: number
  statusCodes: Record<string, number>
  seconds: number
}

/** Response times of 2xx answers, in milliseconds, kept in a growing Float64Array. */
class Latencies {
  private values = new Float64Array(1 << 16)
  length = 0

  add (ms: number): void {
    if (this.length === this.values.length) {
      const bigger = new Float64Array(this.values.length * 2)
      bigger.set(this.values)
      this.values = bigger
    }
    this.values[this.length++] = ms
  }

  /** Nearest-rank percentiles of what was recorded; NaN when nothing was. */
  percentiles (...ps: number[]): number[] {
    const sorted = this.values.subarray(0, this.length).sort()
    return ps.map((p) => this.length === 0 ? NaN : sorted[Math.min(this.length - 1, Math.max(0, Math.ceil(p / 100 * this.length) - 1))]!)
  }
}

function once (options: autocannon.Options, latencies?: { ok: Latencies, other: Latencies }): Promise<autocannon.Result> {
  return new Promise((resolve, reject) => {
    const instance = autocannon(options, (err: unknown, result: autocannon.Result) => err ? reject(err instanceof Error ? err : new Error(String(err))) : resolve(result))
    if (latencies !== undefined) {
      instance.on('response', (_client: unknown, statusCode: number, _bytes: number, responseTime: number) => {
        (statusCode >= 200 && statusCode < 300 ? latencies.ok : latencies.other).add(responseTime)
      })
    }
  })
}

const significant = (n: number) => Number.isFinite(n) ? Number(n.toPrecision(3)) : n

export async function runLoad (options: LoadOptions): Promise<LoadResult> {
  const base: autocannon.Options = {
    url: options.url,
    connections: options.connections,
    requests: options.requests,
    timeout: options.timeout ?? 10
  }
  if (options.warmup && options.warmup > 0) await once({ ...base, duration: options.warmup })
  const latencies = { ok: new Latencies(), other: new Latencies() }
  const result = await once({ ...base, duration: options.duration }, latencies)
  const [p50, p90, p99, max] = latencies.ok.percentiles(50, 90, 99, 100).map(significant) as [number, number, number, number]
  const [non2xxP50, non2xxP99] = latencies.other.percentiles(50, 99).map(significant) as [number, number]
  const statusCodes: Record<string, number> = {}
  for (const [code, stat] of Object.entries(result.statusCodeStats ?? {})) statusCodes[code] = stat.count ?? 0
  const ok = result['2xx']
  const seconds = result.duration || options.duration
  return {
    rps: ok / seconds < 100 ? Math.round(10 * ok / seconds) / 10 : Math.round(ok / seconds),
    ok,
    p50,
    p90,
    p99,
    max,
    errors: result.non2xx + result.errors,
    non2xx: result.non2xx,
    non2xxP50,
    non2xxP99,
    timeouts: result.timeouts,
    socketErrors: result.errors - result.timeouts,
    responses: result.requests.total,
    statusCodes,
    seconds
  }
}
