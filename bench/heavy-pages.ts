// heavy.pages: one user's default GET /tasks page made as heavy as the contract lets it be
// (1,000 tasks with 10,000-character descriptions), fetched by HEAVY_CONNECTIONS connections
// at once, within that user's limits. Two probes (bench/health-probe.js, each a request every
// 100 ms on a connection of its own) measure GET /health and another user's GET /tasks, first
// with the service quiet, then beside that load. Targets (issue 22): the /health probe's p99
// under 50 ms, the other user's GET /tasks p50 within 5 × its quiet p50.
import type { Bench } from './context.js'
import { startProbe } from './health-under-load.js'
import { runLoad } from './load.js'
import { describe, fmt, log, step } from './log.js'
import { bearer } from './requests.js'
import { addHeavyTasks, SPECIAL } from './seed.js'
import type { ProbeResult } from './types.js'

export const HEAVY_TASKS = 1000
export const HEAVY_DESCRIPTION = 10_000
export const HEAVY_CONNECTIONS = 4

const probeLine = (name: string, p: ProbeResult) =>
  `${name.padEnd(26)} p50 ${fmt(p.p50, 2)}  p99 ${fmt(p.p99, 2)}  max ${fmt(p.max, 2)} ms over ${p.count} probes, ${p.failures} failed`

export async function runHeavyPages ({ options, service, runs, accounts, requests, report }: Bench): Promise<void> {
  const { duration, warmup } = options
  step(`heavy pages: ${HEAVY_CONNECTIONS} connections fetch the default GET /tasks page of a user with ${HEAVY_TASKS} tasks of ` +
    `${HEAVY_DESCRIPTION.toLocaleString('en')}-character descriptions; /health and another user's GET /tasks probed, quiet then beside it`)
  await service.withSql((sql) => addHeavyTasks(sql, SPECIAL.heavy, HEAVY_TASKS, HEAVY_DESCRIPTION))
  const heavyToken = accounts.token(SPECIAL.heavy)
  const otherAuthorization = `Bearer ${accounts.readerTokens[0]!}`
  const res = await fetch(`${service.url}/tasks`, { headers: bearer(heavyToken) })
  const body = await res.text()
  if (res.status !== 200) throw new Error(`the heavy user's GET /tasks answered ${res.status} ${body.slice(0, 300)}`)
  const pageBytes = Buffer.byteLength(body)
  const pageTasks = (JSON.parse(body) as { data: unknown[] }).data.length
  log(`  one default page: ${pageTasks} tasks, ${(pageBytes / 2 ** 20).toFixed(2)} MiB${res.headers.get('link') ? `, Link: ${res.headers.get('link')!}` : ''}`)

  // Each probe ends half a second before the load, so every probe lands under it.
  const probeMs = Math.max(500, duration * 1000 - 500)
  const probes = async () => {
    const [health, otherTasks] = await Promise.all([
      startProbe(`${service.url}/health`, probeMs),
      startProbe(`${service.url}/tasks`, probeMs, otherAuthorization)
    ])
    return async () => ({ health: await health.result, otherTasks: await otherTasks.result })
  }
  const load = [requests.listTasks('', [heavyToken])]

  const measured = await runs.stable('heavy pages', async () => {
    await service.waitIdle()
    let stopCpu = await runs.settle()
    const quiet = await (await probes())()
    const quietOthers = stopCpu()
    if (warmup > 0) await runLoad({ url: service.url, connections: HEAVY_CONNECTIONS, duration: warmup, requests: load, timeout: 30 })
    stopCpu = await runs.settle()
    await service.eventLoop()
    service.sampler.beginWindow()
    const loadedProbes = await probes()
    const result = await runLoad({ url: service.url, connections: HEAVY_CONNECTIONS, duration, requests: load, timeout: 30 })
    const loaded = await loadedProbes()
    const rssMB = service.sampler.endWindow()
    const eventLoop = await service.eventLoop()
    const others = Math.max(quietOthers ?? 0, stopCpu() ?? 0)
    describe(`heavy GET /tasks ×${HEAVY_CONNECTIONS}`, { result, rssMB, eventLoop, others })
    log(`  ${probeLine('/health, quiet', quiet.health)}`)
    log(`  ${probeLine('/health, beside', loaded.health)}`)
    log(`  ${probeLine('other GET /tasks, quiet', quiet.otherTasks)}`)
    log(`  ${probeLine('other GET /tasks, beside', loaded.otherTasks)}`)
    return { result, quiet, loaded, rssMB, eventLoop, others }
  }, (m) => m.others)

  const { result, quiet, loaded, rssMB, eventLoop, others } = measured
  report.heavyPages = {
    connections: HEAVY_CONNECTIONS,
    pageBytes,
    pageTasks,
    heavyRps: result.rps,
    heavyP50: result.p50,
    heavyP99: result.p99,
    heavyErrors: result.errors,
    quiet,
    loaded,
    rssMB: Math.round(rssMB),
    eventLoopP99: eventLoop?.p99 ?? null
  }
  report.row(`heavy pages (${HEAVY_CONNECTIONS} connections)`, result, rssMB, eventLoop?.p99 ?? null, '', null, others)
  report.errors += result.errors + quiet.health.failures + quiet.otherTasks.failures + loaded.health.failures + loaded.otherTasks.failures
}
