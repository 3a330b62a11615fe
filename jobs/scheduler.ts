// The one place for the service's background work: named jobs, each an object with start,
// wake, runOnce and stop, so a test runs a pass with runOnce() instead of sleeping. Each
// process runs its own; a job that must run once across instances takes its rows with a lease
// or SKIP LOCKED (the mail sender), or is idempotent (the purges). No Fastify inside: the
// plugin (plugins/app/scheduler.ts) starts them when the app is ready and stops them before
// the database closes. Why our own and not pg-boss: docs/email.md ("The queue").
//
// A job's passes run outside any trace: a timer or a promise started inside a request carries
// the request's context (AsyncLocalStorage) into its callback, and into every timer that
// callback starts, so a job once woken by a request would run every later pass as part of it.
import { context, ROOT_CONTEXT } from '@opentelemetry/api'

/** Pino's shape, the part used here. */
export interface Logger {
  debug: (obj: object, msg: string) => void
  info: (obj: object, msg: string) => void
  warn: (obj: object, msg: string) => void
  error: (obj: object, msg: string) => void
}

export interface BackgroundJob {
  readonly name: string
  /** Runs a pass now, then keeps running at the job's pace. */
  start: () => void
  /** A pass now (or `delayMs` later), or right after the one in progress. */
  wake: (delayMs?: number) => void
  /** One pass, awaited: after the one in progress, if any. Its error is thrown, not logged. What it resolves with is the job's own (the billing actions: how many were attempted). */
  runOnce: () => Promise<unknown>
  /** No new pass; the one in progress gets a grace period, then is aborted. */
  stop: () => Promise<void>
}

/** What a pass is told about the job's end. */
export interface PassSignals {
  /** stop() was called: begin nothing new (a pass that loops checks it between items). */
  stopping: AbortSignal
  /** The grace period is over: abandon what is in progress. */
  abort: AbortSignal
}

export interface PeriodicJobOptions {
  name: string
  /** The time between passes, unless a pass asks for its next one sooner. */
  intervalMs: number
  /** One pass; it may return the milliseconds until the next one is due (capped by intervalMs by the caller). */
  run: (signals: PassSignals) => Promise<number | undefined | void>
  log: Logger
  /** How long stop() lets a pass run before aborting it, and again after aborting it. */
  stopGraceMs?: number
}

const DEFAULT_STOP_GRACE_MS = 3_000

/** Runs `fn` in the root context, as if at start-up: what it starts (timers, promises) belongs to no request. */
export const detached = <T>(fn: () => T): T => context.with(ROOT_CONTEXT, fn)

/** Waits for `promise` (its outcome ignored), at most `ms`. */
export const waitAtMost = async (promise: Promise<unknown>, ms: number): Promise<void> => {
  let timer: NodeJS.Timeout | undefined
  await Promise.race([promise, new Promise((resolve) => { timer = setTimeout(resolve, ms) })])
  clearTimeout(timer)
}

/** A job run every `intervalMs`, one pass at a time, woken early on demand. */
export class PeriodicJob implements BackgroundJob {
  readonly name: string
  readonly #options: PeriodicJobOptions
  readonly #stopping = new AbortController()
  readonly #abort = new AbortController()
  readonly #wakeTimers = new Set<NodeJS.Timeout>()
  #started = false
  /** A wake came during a pass: another pass follows it at once. */
  #again = false
  #running: Promise<void> | undefined
  #timer: NodeJS.Timeout | undefined

  constructor (options: PeriodicJobOptions) {
    this.name = options.name
    this.#options = options
  }

  start (): void {
    if (this.#started || this.#stopping.signal.aborted) return
    this.#started = true
    detached(() => this.#trigger())
  }

  wake (delayMs = 0): void {
    if (this.#stopping.signal.aborted) return
    detached(() => {
      if (delayMs <= 0) return this.#trigger()
      const timer = setTimeout(() => {
        this.#wakeTimers.delete(timer)
        this.#trigger()
      }, delayMs).unref()
      this.#wakeTimers.add(timer)
    })
  }

  /** The pass runs in the caller's context (the caller awaits it); the passes after it do not. */
  async runOnce (): Promise<void> {
    while (this.#running !== undefined) await this.#running
    if (this.#stopping.signal.aborted) return
    const pass = this.#pass()
    this.#track(pass.then(
      (next) => this.#after(next),
      () => this.#after(undefined)
    ))
    await pass
  }

  async stop (): Promise<void> {
    this.#stopping.abort()
    clearTimeout(this.#timer)
    for (const timer of this.#wakeTimers) clearTimeout(timer)
    this.#wakeTimers.clear()
    const inFlight = this.#running
    if (inFlight === undefined) return
    const grace = this.#options.stopGraceMs ?? DEFAULT_STOP_GRACE_MS
    await waitAtMost(inFlight, grace)
    this.#abort.abort()
    await waitAtMost(inFlight, grace)
  }

  #trigger (): void {
    if (this.#stopping.signal.aborted) return
    if (this.#running !== undefined) {
      this.#again = true
      return
    }
    clearTimeout(this.#timer)
    this.#track(this.#pass().then(
      (next) => this.#after(next),
      (err: unknown) => {
        this.#options.log.error({ err, job: this.name }, `${this.name} failed: trying again at the next interval`)
        this.#after(undefined)
      }
    ))
  }

  #pass (): Promise<number | undefined> {
    this.#again = false
    return this.#options.run({ stopping: this.#stopping.signal, abort: this.#abort.signal }).then((next) => next ?? undefined)
  }

  #track (settled: Promise<void>): void {
    const running = settled.finally(() => { if (this.#running === running) this.#running = undefined })
    this.#running = running
  }

  /** After a pass: another at once if woken meanwhile, else the next at its time (once started). */
  #after (next: number | undefined): void {
    if (this.#stopping.signal.aborted) return
    detached(() => {
      if (this.#again) {
        setImmediate(() => this.#trigger())
        return
      }
      if (!this.#started) return
      clearTimeout(this.#timer)
      const wait = Math.min(next ?? this.#options.intervalMs, this.#options.intervalMs)
      this.#timer = setTimeout(() => this.#trigger(), wait).unref()
    })
  }
}

/** The named jobs of one process: started together, stopped together. */
export class Scheduler {
  readonly #jobs = new Map<string, BackgroundJob>()
  readonly #log: Logger
  #started = false

  constructor (log: Logger) {
    this.#log = log
  }

  /** Adds a job (started at once if the scheduler runs already). Names are unique. */
  add<J extends BackgroundJob> (job: J): J {
    if (this.#jobs.has(job.name)) throw new Error(`a job named ${job.name} is scheduled already`)
    this.#jobs.set(job.name, job)
    if (this.#started) job.start()
    return job
  }

  /** A job that runs `run` every `intervalMs` (a purge, a reminder sweep). */
  every (name: string, intervalMs: number, run: PeriodicJobOptions['run']): PeriodicJob {
    return this.add(new PeriodicJob({ name, intervalMs, run, log: this.#log }))
  }

  /**
   * A purge every `intervalMs`: a pass that removed anything says what at info (`purge` answers
   * the counts, logged as they are); one that failed says so at warn, not as the job's error: a
   * database away for a moment is not an error of ours, and the next pass catches up.
   */
  purgeEvery (name: string, intervalMs: number, purge: () => Promise<Record<string, number> | void>, messages: { purged?: string, failed: string }): PeriodicJob {
    return this.every(name, intervalMs, async () => {
      try {
        const counts = await purge()
        if (counts !== undefined && messages.purged !== undefined && Object.values(counts).some((n) => n > 0)) this.#log.info(counts, messages.purged)
      } catch (err) {
        this.#log.warn({ err }, `${messages.failed}: trying again later`)
      }
    })
  }

  job (name: string): BackgroundJob {
    const job = this.#jobs.get(name)
    if (job === undefined) throw new Error(`no job named ${name}`)
    return job
  }

  get names (): string[] {
    return [...this.#jobs.keys()]
  }

  start (): void {
    this.#started = true
    for (const job of this.#jobs.values()) job.start()
  }

  /** One pass of the named job, awaited (tests). */
  async runOnce (name: string): Promise<void> {
    await this.job(name).runOnce()
  }

  /** Stops every job, each with its grace period, all at once. */
  async stop (): Promise<void> {
    await Promise.allSettled([...this.#jobs.values()].map((job) => job.stop()))
  }
}
