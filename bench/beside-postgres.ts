// With --db=pglite, the same service on PostgreSQL in the same run, for the embedded
// database's targets: start-up to the first /health 200 (fresh, then current schema), GET /tasks
// req/s and health.underLoad. Run after the embedded service has stopped, on a benchmark
// database of its own, seeded the same way.
import { seedAndSignIn } from './accounts.js'
import { seedThroughApi } from './api-seeded.js'
import type { CleanUps } from './cleanup.js'
import { createDatabase } from './database.js'
import { measureHealthUnderLoad } from './health-under-load.js'
import { measureIdle } from './idle.js'
import { describe, log, step } from './log.js'
import { RequestSets } from './requests.js'
import { Runs } from './runs.js'
import { Service } from './service.js'
import type { BesidePostgres, Options } from './types.js'

export async function measureBesidePostgres (options: Options, root: string, cleanups: CleanUps): Promise<BesidePostgres> {
  step('the same service on PostgreSQL, for the embedded database\'s comparisons')
  const database = await createDatabase('postgres', options.databaseServerUrl, cleanups)
  const service = new Service({ root, database, extraEnv: options.env }, cleanups)
  const runs = new Runs(service, options, cleanups)
  const startupMs = await service.timedStart()
  log(`  up in ${startupMs} ms`)
  const startupCurrentMs = await service.timedRestart()
  log(`  started again on the current schema: up in ${startupCurrentMs} ms`)
  const accounts = await seedAndSignIn(service, options.settings)
  const requests = new RequestSets(accounts, options.settings)
  const idle = options.wanted('idle') ? await measureIdle(service, options.quick ? 5 : 10) : undefined
  let tasksList: BesidePostgres['tasksList']
  if (options.wanted('tasks.list')) {
    const m = await runs.stable('tasks.list on PostgreSQL', async () => {
      const r = await runs.measure('tasks.list', requests.for('tasks.list'))
      describe('tasks.list (PostgreSQL)', r)
      return r
    }, (r) => r.others)
    tasksList = { rps: m.result.rps, p50: m.result.p50, p99: m.result.p99, errors: m.result.errors }
  }
  const healthUnderLoad = options.wanted('health.underLoad') ? await measureHealthUnderLoad(runs, service, requests, await seedThroughApi(service), options) : undefined
  const peakRssMB = service.sampler.overallPeak
  await service.waitIdle()
  await service.stop()
  await service.closeSql()
  service.sampler.stop()
  return { startupMs, startupCurrentMs, idle, tasksList, healthUnderLoad, peakRssMB }
}
