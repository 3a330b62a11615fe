// The login storm (GET /tasks without, then with 8 clients signing in continuously) and the
// login overload (more sign-ins at once than the hashing queue holds).
import type { Bench } from './context.js'
import { runLoad } from './load.js'
import { describe, step } from './log.js'
import { sleep } from './proc.js'
import type { Storm } from './report.js'

const STORM_CLIENTS = 8
/** Twice the default hashing queue (BCRYPT_QUEUE_MAX, 64). */
const OVERLOAD_CLIENTS = 128

export async function runStorm ({ options, service, runs, requests, report }: Bench): Promise<void> {
  const { connections, duration, warmup, quietWait } = options
  step(`login storm: GET /tasks at ${connections} connections, without and then with ${STORM_CLIENTS} clients logging in continuously`)
  const { without, during, stormRss, stormLoop, stormOthers, loginResult } = await runs.stable('the storm', async () => {
    const without = await runs.measure('storm: without', [requests.listTasks()])
    describe('GET /tasks, no storm', without)
    await service.waitIdle()
    await runs.cpu.quiet(quietWait)
    if (warmup > 0) await runLoad({ url: service.url, connections, duration: warmup, requests: [requests.listTasks()] })
    // Logins start a second early and end a second late, so the storm covers the whole window.
    const logins = runLoad({ url: service.url, connections: STORM_CLIENTS, duration: duration + 2, requests: requests.for('login'), timeout: 60 })
    await sleep(1000)
    await service.eventLoop()
    service.sampler.beginWindow()
    const stopCpu = runs.cpu.start()
    const during = await runLoad({ url: service.url, connections, duration, requests: [requests.listTasks()] })
    const stormOthers = stopCpu()
    const stormRss = service.sampler.endWindow()
    const stormLoop = await service.eventLoop()
    const loginResult = await logins
    describe('GET /tasks, storm', { result: during, rssMB: stormRss, eventLoop: stormLoop, others: stormOthers })
    describe(`POST /auth/login ×${STORM_CLIENTS}`, { result: loginResult })
    await service.waitIdle()
    return { without, during, stormRss, stormLoop, stormOthers, loginResult }
  }, (r) => Math.max(r.without.others ?? 0, r.stormOthers ?? 0))
  const storm: Storm = {
    p99Without: without.result.p99,
    p99With: during.p99,
    eventLoopP99: stormLoop?.p99 ?? NaN,
    loginsPerSec: loginResult.rps,
    rejected: loginResult.errors
  }
  report.storm = storm
  report.row('storm: tasks.list without', { ...without.result, cpuUs: without.cpuUs }, without.rssMB, without.eventLoop?.p99 ?? null, '', null, without.others)
  report.row('storm: tasks.list with', during, stormRss, stormLoop?.p99 ?? null, '', null, stormOthers)
  report.row(`storm: logins (${STORM_CLIENTS} clients)`, { ...loginResult, rps: storm.loginsPerSec }, null, null, '', null)
  report.errors += without.result.errors + during.errors + loginResult.errors

  // More concurrent sign-ins than the hashing queue holds (BCRYPT_QUEUE_MAX, default 64):
  // the excess must be shed at once with 503, not queued. Those 503s are the expected
  // answer here; anything else that is not a 200 counts as an error.
  step(`login overload: ${OVERLOAD_CLIENTS} clients signing in at once (twice the default hashing queue)`)
  await service.waitIdle()
  const overload = await runLoad({ url: service.url, connections: OVERLOAD_CLIENTS, duration: Math.min(duration, 5), requests: requests.for('login'), timeout: 60 })
  const shed = overload.statusCodes['503'] ?? 0
  const unexpected = overload.errors - shed
  storm.overload = {
    connections: OVERLOAD_CLIENTS,
    loginsPerSec: overload.rps,
    shedPerSec: Math.round(shed / overload.seconds),
    shedP50: overload.non2xxP50,
    shedP99: overload.non2xxP99,
    acceptedP50: overload.p50,
    acceptedP99: overload.p99,
    unexpected
  }
  describe(`POST /auth/login ×${OVERLOAD_CLIENTS}`, { result: overload })
  report.row(`login overload (${OVERLOAD_CLIENTS} clients)`, { ...overload, errors: unexpected }, null, null, '', null)
  report.errors += unexpected
  await service.waitIdle()
}
