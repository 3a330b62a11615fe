// The command line: the flags, their help text, and the settings they come to (--quick
// changes the defaults). Read once by bench/run.ts; every part is handed the result.
import path from 'node:path'
import { parseArgs } from 'node:util'
import { ROOT } from './paths.js'
import { SCENARIOS, type DbKind, type Options, type Settings } from './types.js'

export const HELP = `npm run bench -- [options]

  --quick                2 s per scenario, 200 users, growth up to 100k tasks (CI smoke test)
  --duration=N           seconds per scenario (default 10; --quick 2)
  --warmup=N             seconds of unmeasured load before each scenario (default 2; --quick 0.5)
  --connections=N        autocannon connections (default 50)
  --pairs=N              health and tasks.list are measured as N interleaved runs of ceiling then
                         service; the median pair (by ratio) is reported (default 5; --quick 1)
  --db=postgres|pglite   database (default postgres); pglite also measures the same service on
                         PostgreSQL (start-up, tasks.list, health.underLoad) for comparison
  --database-url=URL     server to create the benchmark database on
                         (default $DATABASE_URL, else postgres://postgres@127.0.0.1:5432/postgres)
  --users=N              seeded users (default 1000; --quick 200)
  --tasks=N              tasks per seeded user (default 50)
  --soak                 also 5 minutes of mixed load, RSS before/after (--soak-minutes=N)
  --only=a,b             only these parts: idle (the service's CPU, and its database's
                         transactions, with no request to serve), ceilings, <scenario names>, health.underLoad (a /health
                         probe every 50 ms during GET /tasks load as 20 users seeded through the
                         API), heavy.pages (/health and
                         another user's GET /tasks probed while 4 connections fetch a user's
                         1,000 tasks of 10,000-character descriptions), metrics (GET /tasks with
                         metrics served and without), apikey (GET /tasks with the readers' API keys
                         against their session tokens), storm, timing (an unknown account's
                         sign-in and "forgot" against a known one's), growth
  --profile=SCENARIO     instead of the benchmark: run one scenario under node --cpu-prof (the
                         service's, or ceiling.database / ceiling.framework / ceiling.framework+headers) and summarize
                         where the CPU went during the measured window, per request
  --env=KEY=VALUE        extra service environment (repeatable), e.g. --env=BCRYPT_WORKERS=2
  --skip-build           use the project's dist/ as it is (default: a clean build in a temporary directory)
  --service=DIR          measure the service built in DIR instead (another commit's checkout with its
                         node_modules and dist/, e.g. a git worktree), with this benchmark and node flags
  --out=FILE             results file (default bench/results.json; --quick: bench/results-quick.json;
                         --db=pglite adds -pglite; the results-*.json names are gitignored)
  --quiet-wait=N         before each run, wait up to N s for other processes on the machine to
                         use under 0.25 cores (default 60; --quick 2); what they used is reported
  --retries=N            measure a run again, up to N times, when other processes used ≥ 0.25
                         cores during it; the quietest attempt counts (default 2; --quick 0)
  --assert-targets       exit 1 when a target of the performance issues is missed (default: only on
                         errors); with --quick only the targets a run of seconds tells (marked *)
`

export const PROFILE_TARGETS: readonly string[] = [...SCENARIOS, 'ceiling.database', 'ceiling.framework', 'ceiling.framework+headers']

const num = (value: string | undefined, fallback: number, name: string): number => {
  if (value === undefined) return fallback
  const n = Number(value)
  if (!Number.isFinite(n) || n < 0) throw new Error(`--${name} must be a non-negative number`)
  return n
}

/** The options of `args`; --help prints the help and exits, a bad value throws. */
export function readOptions (args: string[]): Options {
  const { values: opts } = parseArgs({
    args,
    options: {
      quick: { type: 'boolean', default: false },
      duration: { type: 'string' },
      warmup: { type: 'string' },
      connections: { type: 'string' },
      pairs: { type: 'string' },
      db: { type: 'string', default: 'postgres' },
      'database-url': { type: 'string' },
      users: { type: 'string' },
      tasks: { type: 'string' },
      soak: { type: 'boolean', default: false },
      'soak-minutes': { type: 'string' },
      only: { type: 'string' },
      profile: { type: 'string' },
      env: { type: 'string', multiple: true },
      'skip-build': { type: 'boolean', default: false },
      service: { type: 'string' },
      out: { type: 'string' },
      'assert-targets': { type: 'boolean', default: false },
      'quiet-wait': { type: 'string' },
      retries: { type: 'string' },
      help: { type: 'boolean', default: false }
    },
    strict: true
  })

  if (opts.help) {
    console.log(HELP)
    process.exit(0)
  }

  if (opts.db !== 'postgres' && opts.db !== 'pglite') throw new Error('--db must be postgres or pglite')
  const db: DbKind = opts.db
  const quick = opts.quick
  const duration = num(opts.duration, quick ? 2 : 10, 'duration')
  const warmup = num(opts.warmup, quick ? 0.5 : 2, 'warmup')
  const connections = num(opts.connections, 50, 'connections')
  const pairs = Math.max(1, Math.round(num(opts.pairs, quick ? 1 : 5, 'pairs')))
  const quietWait = num(opts['quiet-wait'], quick ? 2 : 60, 'quiet-wait')
  const retries = num(opts.retries, quick ? 0 : 2, 'retries')
  const settings: Settings = {
    users: num(opts.users, quick ? 200 : 1000, 'users'),
    tasksPerUser: num(opts.tasks, 50, 'tasks'),
    readers: quick ? 4 : 8,
    writers: quick ? 4 : 8,
    customers: quick ? 50 : 100,
    growth: quick ? [10_000, 100_000] : [10_000, 100_000, 1_000_000],
    soakMinutes: num(opts['soak-minutes'], 5, 'soak-minutes')
  }
  if (settings.users < settings.readers + settings.writers || settings.users < settings.customers) {
    throw new Error(`--users must be at least ${Math.max(settings.readers + settings.writers, settings.customers)}`)
  }
  const only = opts.only === undefined ? undefined : new Set(opts.only.split(',').map((s) => s.trim()))
  const profile = opts.profile
  if (profile !== undefined && !PROFILE_TARGETS.includes(profile)) throw new Error(`--profile must be one of ${PROFILE_TARGETS.join(', ')}`)
  const out = path.resolve(opts.out ?? path.join(ROOT, 'bench', `results${quick ? '-quick' : ''}${db === 'pglite' ? '-pglite' : ''}.json`))
  const env = Object.fromEntries((opts.env ?? []).map((pair) => {
    const at = pair.indexOf('=')
    if (at <= 0) throw new Error(`--env expects KEY=VALUE, got ${pair}`)
    return [pair.slice(0, at), pair.slice(at + 1)]
  }))
  return {
    db,
    databaseServerUrl: opts['database-url'] ?? process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres',
    quick,
    duration,
    warmup,
    connections,
    pairs,
    quietWait,
    retries,
    settings,
    wanted: (part) => only === undefined || only.has(part),
    profile,
    soak: opts.soak,
    env,
    skipBuild: opts['skip-build'],
    serviceRoot: opts.service === undefined ? undefined : path.resolve(opts.service),
    out,
    assertTargets: opts['assert-targets']
  }
}
