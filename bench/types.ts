// The shapes the benchmark's modules share, and the scenario names, in one module that imports
// none of the others (but load.ts's result type): so they import each other one way only. The
// report types a part's results from here, not from the part, which is handed the report.
import type { Idle } from './idle.js'
import type { LoadResult } from './load.js'

export type DbKind = 'postgres' | 'pglite'

export interface Settings {
  users: number
  tasksPerUser: number
  /** Users whose tokens the read scenarios rotate through. */
  readers: number
  /** Users who create and update tasks. */
  writers: number
  /** Users with an active subscription (webhook targets). */
  customers: number
  /** Table sizes of the growth series. */
  growth: number[]
  soakMinutes: number
}

export interface Options {
  db: DbKind
  /** The PostgreSQL server to create the benchmark database on. */
  databaseServerUrl: string
  quick: boolean
  /** Seconds per measured run. */
  duration: number
  /** Seconds of unmeasured load before a run. */
  warmup: number
  connections: number
  pairs: number
  /** Seconds to wait at most for other processes to settle before a run. */
  quietWait: number
  retries: number
  settings: Settings
  /** Whether --only asks for this part (every part without --only). */
  wanted: (part: string) => boolean
  /** --profile's target: a scenario or a ceiling. */
  profile: string | undefined
  soak: boolean
  /** Extra service environment (--env). */
  env: Record<string, string>
  skipBuild: boolean
  /** --service: another build to measure (its dist/server.js), instead of this project's. */
  serviceRoot: string | undefined
  /** The results file, absolute. */
  out: string
  assertTargets: boolean
}

/** The service's scenarios, in the order they run. */
export const SCENARIOS = ['health', 'tasks.list', 'tasks.list.filtered', 'tasks.create', 'tasks.create.keyed', 'tasks.update', 'preferences.get', 'webhook', 'login'] as const
export type ScenarioName = typeof SCENARIOS[number]

/** How a run differs from the options' defaults. */
export interface RunOptions { warmup?: number, duration?: number, timeout?: number, connections?: number }

/** A measured window: milliseconds since the epoch. */
export interface Window { from: number, to: number }

/** The seeded users the scenarios act as, signed in. */
export interface Accounts {
  /** Tokens that GET scenarios rotate through. */
  readerTokens: string[]
  /** Users who create and update tasks. */
  writerEmails: string[]
  /** The first task ids of each writer, in writerEmails' order. */
  writerTasks: number[][]
  /** The token of a signed-in user (readers, writers and SPECIAL). */
  token: (email: string) => string
  /** The user id of a writer or a SPECIAL user. */
  idOf: (email: string) => string
}

/** A probe's latencies, ms, and its failures (non-200 answers, errors, timeouts). */
export interface ProbeResult { count: number, p50: number, p99: number, max: number, failures: number }

export interface HealthUnderLoad extends ProbeResult {
  /** GET /tasks meanwhile, as the users seeded through the API (bench/api-seeded.ts). */
  loadRps: number
  loadErrors: number
  /** The service's CPU time ÷ GET /tasks responses, µs. */
  loadCpuUs: number | null
  /** PostgreSQL's backends serving the service's database: their CPU time ÷ GET /tasks responses, µs (null embedded). */
  loadDbCpuUs?: number | null
  /** How many users the load rotated through. */
  users: number
}

/** The health probe's figures with GET /tasks load on the embedded database beside PostgreSQL's. */
export interface BesidePostgres {
  /** Start-up to the first 200 on /health, fresh database (migrations included), ms. */
  startupMs: number
  /** Start-up again on the same database, its schema current, ms. */
  startupCurrentMs: number
  /** The service with no request to serve (bench/idle.ts). */
  idle: Idle | undefined
  tasksList: { rps: number, p50: number, p99: number, errors: number } | undefined
  healthUnderLoad: HealthUnderLoad | undefined
  peakRssMB: number
}

/** Four connections fetching one user's pages of heavy tasks, and probes of others beside them. */
export interface HeavyPages {
  connections: number
  /** The heavy user's default page as one request saw it: bytes of the body, tasks in it. */
  pageBytes: number
  pageTasks: number
  /** The heavy load itself. */
  heavyRps: number
  heavyP50: number
  heavyP99: number
  heavyErrors: number
  quiet: { health: ProbeResult, otherTasks: ProbeResult }
  loaded: { health: ProbeResult, otherTasks: ProbeResult }
  /** Peak RSS of the service and its event-loop delay p99 beside the load. */
  rssMB: number
  eventLoopP99: number | null
}

/** A ceiling: a process that answers what the service answers with less of it. */
export type CeilingKind = 'framework' | 'framework+headers' | 'database'

export interface CeilingRun {
  kind: CeilingKind
  result: LoadResult
  window: Window
  /** When its process was started (a CPU profile's clock starts there). */
  spawnedAt: number
  others: number | undefined
  /** The ceiling process's CPU per response over the window, in µs (as the service's). */
  cpuUs: number | null
}

/** Two kinds of request timed alternately (bench/timing.ts), in ms; ratio = first ÷ second. */
export interface TimingPair { first: number, second: number, ratio: number }
export interface Timing {
  /** Medians: an unknown email, a wrong password. */
  login: TimingPair
  /** Medians: an unknown address, a known one. */
  forgot: TimingPair
  /** Lower quartiles of GET /auth/me sent right after: an unknown address, a known one. */
  afterForgot: TimingPair
}
