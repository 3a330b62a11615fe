// How one run is measured: a request by hand first (a misconfigured scenario says why at
// once), the service left idle, a warm-up, the machine left to settle, then the window
// with the service's RSS peak and event-loop delay and the cores other processes used;
// measured again (--retries) when those were too many, or when the service died.
import type { CleanUps } from './cleanup.js'
import { CpuWatch, processTicks } from './cpu.js'
import { runLoad, type LoadResult, type Request } from './load.js'
import { fmt, log } from './log.js'
import type { Managed } from './proc.js'
import { ServiceDied, type EventLoop, type Service } from './service.js'
import type { Options, RunOptions, Window } from './types.js'

/** Cores used by other processes above which a run counts as disturbed. */
export const NOISY = 0.25

export interface Measured {
  result: LoadResult
  rssMB: number
  eventLoop: EventLoop | undefined
  others: number | undefined
  window: Window
  /** The service process's own CPU time (user + system, all its threads) ÷ responses, µs; null where /proc is not. */
  cpuUs: number | null
}

/** CPU time of `pid` (all its threads) per response between two readings of processTicks, µs. */
export function cpuPerResponse (before: number | undefined, after: number | undefined, responses: number): number | null {
  if (before === undefined || after === undefined || responses === 0) return null
  return Math.round((after - before) * 10_000 / responses)
}

/** One request by hand before a run; what was wrong with its answer, if anything. */
export async function smoke (base: string, request: Request): Promise<string | undefined> {
  const req = typeof request.setupRequest === 'function' ? request.setupRequest({ ...request, headers: { ...request.headers } }, {}) : request
  const res = await fetch(`${base}${req.path ?? '/'}`, {
    method: req.method ?? 'GET',
    headers: req.headers as Record<string, string>,
    ...(req.body !== undefined && { body: req.body })
  })
  const text = await res.text()
  return res.status >= 200 && res.status < 300 ? undefined : `${res.status} ${text.slice(0, 300)}`
}

/** A ratio to three decimals, as the report keeps them. */
export const roundRatio = (ratio: number): number => Math.round(1000 * ratio) / 1000

/**
 * Of interleaved pairs, the median by ratio (the one reported: on a shared VM identical runs
 * differ more than the two sides of one pair), and every pair's ratio, lowest first, rounded;
 * logs them under `label` when there was more than one pair.
 */
export function medianPair<P extends { ratio: number }> (measured: P[], label: string): { median: P, ratios: number[] } {
  const byRatio = [...measured].sort((a, b) => a.ratio - b.ratio)
  if (byRatio.length > 1) log(`  ${label}: ratios of the ${byRatio.length} pairs ${byRatio.map((p) => `${(100 * p.ratio).toFixed(0)} %`).join(', ')}; the median pair is reported`)
  return { median: byRatio[Math.floor((byRatio.length - 1) / 2)]!, ratios: byRatio.map((p) => roundRatio(p.ratio)) }
}

export class Runs {
  /** The benchmark's other processes (ceilings): their CPU is not "other processes". */
  readonly children: Managed[] = []
  /** Why the service ended unexpectedly, each time it did and was restarted. */
  readonly unexpectedExits: string[] = []
  readonly cpu: CpuWatch

  constructor (private readonly service: Service, private readonly options: Options, cleanups: CleanUps) {
    cleanups.add(async () => { for (const child of this.children) await child.stop(3000) })
    this.cpu = new CpuWatch(() => [...(service.proc ? [service.proc.pid] : []), ...this.children.map((c) => c.pid)], service.database.name)
  }

  /**
   * Runs `fn` again (up to --retries times) while other processes used ≥ 0.25 cores during
   * it, and keeps the quietest attempt.
   */
  async stable<T> (label: string, fn: () => Promise<T>, othersOf: (t: T) => number | undefined): Promise<T> {
    const retries = this.options.retries
    let best: { value: T, others: number } | undefined
    for (let attempt = 0; attempt <= retries; attempt++) {
      let value: T
      try {
        value = await fn()
      } catch (err) {
        if (!(err instanceof ServiceDied) || attempt >= retries) throw err
        this.unexpectedExits.push(err.message)
        log(`  ! ${err.message.trim()}\n  (restarting the service and measuring ${label} again)`)
        await this.service.stop()
        await this.service.start()
        continue
      }
      const others = othersOf(value) ?? 0
      if (best === undefined || others < best.others) best = { value, others }
      if (others < NOISY) break
      if (attempt < retries) log(`  (other processes used ${fmt(others)} cores during ${label}: measuring again)`)
    }
    if (best === undefined) throw new Error(`${label}: no attempt succeeded`)
    return best.value
  }

  /** Waits for the machine to settle; returns the stop function of a CPU window. */
  async settle (): Promise<() => number | undefined> {
    const quiet = await this.cpu.quiet(this.options.quietWait)
    if (quiet.waited > 1.2) log(`  (waited ${quiet.waited.toFixed(0)} s for other processes to settle; they use ${fmt(quiet.others)} cores)`)
    const stop = this.cpu.start()
    return stop
  }

  /** One measured run against the service: RSS peak and event-loop delay over it. */
  async measure (name: string, requests: Request[], options: RunOptions = {}): Promise<Measured> {
    const service = this.service
    const connections = options.connections ?? this.options.connections
    if (!service.alive()) throw new ServiceDied(`the service is not running (before ${name}):\n${service.proc?.output.tail.join('\n') ?? ''}`)
    const problem = await smoke(service.url, requests[0]!)
    if (problem !== undefined) log(`  ! ${name}: a single request answered ${problem}`)
    await service.waitIdle()
    const warm = options.warmup ?? this.options.warmup
    if (warm > 0) await runLoad({ url: service.url, connections, duration: warm, requests, timeout: options.timeout })
    const stopCpu = await this.settle()
    await service.eventLoop()
    service.sampler.beginWindow()
    const from = Date.now()
    const ticksBefore = processTicks(service.proc!.pid)
    const result = await runLoad({ url: service.url, connections, duration: options.duration ?? this.options.duration, requests, timeout: options.timeout })
    const cpuUs = cpuPerResponse(ticksBefore, processTicks(service.proc!.pid), result.responses)
    const window = { from, to: Date.now() }
    const peak = service.sampler.endWindow()
    const eventLoop = await service.eventLoop()
    const others = stopCpu()
    if (!service.alive()) throw new ServiceDied(`the service died during ${name} (exit ${String(await service.proc?.exited)}):\n${service.proc?.output.tail.join('\n') ?? ''}`)
    return { result, rssMB: peak, eventLoop, others, window, cpuUs }
  }
}
