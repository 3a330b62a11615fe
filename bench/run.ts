// `npm run bench`: builds the service, starts it as production runs it (compiled,
// NODE_ENV=production, LOG_LEVEL=warn) on a database of its own, seeds it, and measures it
// with autocannon against ceilings started here too (a bare Fastify hello-world, the same
// with GET /health's headers, and a bare Fastify route running GET /tasks's SQL with plain
// pg). Then health.underLoad, heavy pages, the login storm, the timing of unknown
// against known accounts, the growth series and, with --soak, minutes
// of mixed load; with --db=pglite, the same service on PostgreSQL for comparison.
// Prints one table and writes bench/results.json. See `npm run bench -- --help` and
// bench/README.md.
//
// This file only puts the parts in order; each lives in a module of its own:
//   options.ts      the flags and the settings they come to
//   service.ts      the build, and the service process as production runs it
//   database.ts     the benchmark's own database; accounts.ts the seeded, signed-in users
//   requests.ts     what each scenario sends;  runs.ts  how one run is measured
//   ceilings.ts     the bare-Fastify ceilings;  scenarios.ts  the scenarios and their pairs
//   health-under-load.ts  a lone /health probe from another process during GET /tasks load
//   heavy-pages.ts  /health and another user's GET /tasks probed while one user's heaviest pages are fetched
//   beside-postgres.ts    with --db=pglite, the same service on PostgreSQL for comparison
//   metrics-cost.ts, storm.ts, timing.ts, soak.ts, growth.ts, profile-run.ts  the other parts
//   report.ts       the table, results.json and the targets
import { existsSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { seedAndSignIn } from './accounts.js'
import { seedThroughApi } from './api-seeded.js'
import { measureBesidePostgres } from './beside-postgres.js'
import { Ceilings } from './ceilings.js'
import { CleanUps } from './cleanup.js'
import type { Bench } from './context.js'
import { createDatabase } from './database.js'
import { runGrowth } from './growth.js'
import { measureHealthUnderLoad } from './health-under-load.js'
import { measureIdle } from './idle.js'
import { runHeavyPages } from './heavy-pages.js'
import { runApiKeyCost } from './api-key-cost.js'
import { runMetricsCost } from './metrics-cost.js'
import { fmt, log, step } from './log.js'
import { readOptions } from './options.js'
import { ROOT } from './paths.js'
import { rssMB } from './proc.js'
import { runProfile } from './profile-run.js'
import { describeMachine, printIncidents, printTargets, Report } from './report.js'
import { RequestSets } from './requests.js'
import { Runs } from './runs.js'
import { runScenarios } from './scenarios.js'
import { build, Service } from './service.js'
import { runSoak } from './soak.js'
import { runStorm } from './storm.js'
import { runTiming } from './timing.js'

const options = readOptions(process.argv.slice(2))
const cleanups = new CleanUps()
cleanups.onSignals()

/** The exit code: 0, or 1 on errors, a crash of the service, or (--assert-targets) a missed target. */
async function main (): Promise<number> {
  const started = Date.now()
  const { db, quick, duration, warmup, connections, settings, wanted } = options
  log(`Benchmark: ${db}, ${duration} s per scenario (+${warmup} s warm-up), ${connections} connections${quick ? ', quick' : ''}`)

  let serviceRoot = options.serviceRoot ?? ROOT
  if (!options.skipBuild && options.serviceRoot === undefined) {
    step('building (tsc -p tsconfig.build.json, clean, into a directory of its own)')
    serviceRoot = await build(cleanups)
  }
  if (!existsSync(path.join(serviceRoot, 'dist', 'server.js'))) throw new Error('dist/server.js is missing: run without --skip-build')
  log(`service: node ${path.join(serviceRoot, 'dist', 'server.js')}`)

  const database = await createDatabase(db, options.databaseServerUrl, cleanups)
  const service = new Service({ root: serviceRoot, database, extraEnv: options.env }, cleanups)
  const runs = new Runs(service, options, cleanups)

  step('starting the service (it migrates the database)')
  const report = new Report()
  report.startupMs = await service.timedStart()
  log(`  up in ${report.startupMs} ms, pid ${service.proc!.pid}, RSS ${fmt(rssMB(service.proc!.pid))} MB`)
  report.startupCurrentMs = await service.timedRestart()
  log(`  started again on the current schema: up in ${report.startupCurrentMs} ms`)

  const accounts = await seedAndSignIn(service, settings)
  if (wanted('idle')) report.idle = await measureIdle(service, quick ? 5 : 10)
  const requests = new RequestSets(accounts, settings)
  const ceilings = await Ceilings.capture({ options, service, runs, requests, readerToken: accounts.readerTokens[0]! })
  const bench: Bench = { options, service, runs, accounts, requests, ceilings, report }

  if (options.profile !== undefined) {
    await runProfile(bench, options.profile)
    return 0
  }
  await runScenarios(bench)
  if (wanted('health.underLoad')) report.healthUnderLoad = await measureHealthUnderLoad(runs, service, requests, await seedThroughApi(service), options)
  if (wanted('heavy.pages')) await runHeavyPages(bench)
  if (wanted('metrics')) await runMetricsCost(bench)
  if (wanted('apikey')) await runApiKeyCost(bench)
  if (wanted('storm')) await runStorm(bench)
  if (wanted('timing')) report.timing = await runTiming(bench)
  if (options.soak) await runSoak(bench)
  if (wanted('growth')) await runGrowth(bench)

  const peakRss = service.sampler.overallPeak
  // Requests the load generator abandoned at the end of the last run are still being served.
  await service.waitIdle()
  await service.stop()
  await service.closeSql()
  service.sampler.stop()
  if (db === 'pglite' && (wanted('tasks.list') || wanted('health.underLoad') || wanted('idle'))) {
    report.besidePostgres = await measureBesidePostgres(options, serviceRoot, cleanups)
  }
  await cleanups.run()

  const machine = describeMachine(database.version)
  writeFileSync(options.out, JSON.stringify(report.results(machine, db), null, 2) + '\n')
  report.print(machine, options, peakRss)
  const checks = report.targets(db, peakRss)
  printTargets(checks)
  printIncidents(runs.unexpectedExits, service.logged)

  log(`\nresults: ${path.relative(process.cwd(), options.out) || options.out}  (${((Date.now() - started) / 1000).toFixed(0)} s in all)`)
  log(report.errors === 0 ? 'errors: 0' : `ERRORS: ${report.errors} (non-2xx responses, socket errors, timeouts) — see the table`)
  if (report.errors > 0 || runs.unexpectedExits.length > 0) return 1
  // --quick asserts only what a run of seconds can tell on any machine.
  if (options.assertTargets && checks.some(([, ok, , short]) => ok === false && (!quick || short === true))) return 1
  return 0
}

main().then(async (code) => {
  await cleanups.run()
  process.exit(code)
}, async (err: unknown) => {
  console.error(`\nbenchmark failed: ${err instanceof Error ? err.stack ?? err.message : String(err)}`)
  await cleanups.run()
  process.exit(2)
})
