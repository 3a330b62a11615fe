// health.underLoad: what a load balancer's health check sees while the service is busy. A
// process of its own (bench/health-probe.js) sends GET /health every 50 ms on its own
// connection while GET /tasks load runs as the users seeded through the API
// (bench/api-seeded.ts: 20 users over the 50 connections); its latencies are the scenario's
// figures, and the GET /tasks req/s and CPU per request beside them. On PGlite this is what
// tells whether queries run on the event loop: there, every probe waits for the queries
// queued before it; and its req/s against PostgreSQL's is the embedded database's share.
import { spawn } from 'node:child_process'
import path from 'node:path'
import { createInterface } from 'node:readline'
import { backendTicks, processTicks } from './cpu.js'
import { runLoad } from './load.js'
import { describe, fmt, log } from './log.js'
import { BENCH_DIR } from './paths.js'
import type { RequestSets } from './requests.js'
import { cpuPerResponse, type Runs } from './runs.js'
import type { Service } from './service.js'
import type { HealthUnderLoad, Options, ProbeResult } from './types.js'

const PROBE = path.join(BENCH_DIR, 'health-probe.js')
const INTERVAL_MS = 50

/**
 * Starts bench/health-probe.js on `url` (a request every 50 ms on one kept-alive connection
 * for `durationMs`, with `authorization` if given) and resolves once it is ready to probe.
 */
export async function startProbe (url: string, durationMs: number, authorization?: string): Promise<{ result: Promise<ProbeResult> }> {
  const env = authorization === undefined ? process.env : { ...process.env, PROBE_AUTHORIZATION: authorization }
  const probe = spawn(process.execPath, [PROBE, url, String(INTERVAL_MS), String(durationMs)], { stdio: ['ignore', 'pipe', 'inherit'], env })
  const lines = createInterface({ input: probe.stdout })[Symbol.asyncIterator]()
  if ((await lines.next()).value !== 'ready') throw new Error(`the probe of ${url} did not start`)
  return { result: lines.next().then((line) => JSON.parse(line.value as string) as ProbeResult) }
}

/** `tokens`: the users the GET /tasks load rotates through (those seeded through the API). */
export async function measureHealthUnderLoad (runs: Runs, service: Service, requests: RequestSets, tokens: string[], options: Options): Promise<HealthUnderLoad> {
  const { connections, duration, warmup } = options
  const load = [requests.listTasks('', tokens)]
  return runs.stable('health.underLoad', async () => {
    await service.waitIdle()
    if (warmup > 0) await runLoad({ url: service.url, connections, duration: warmup, requests: load })
    const stopCpu = await runs.settle()
    // The probe stops half a second before the load, so every probe lands under load.
    const probe = await startProbe(`${service.url}/health`, Math.max(500, duration * 1000 - 500))
    const database = service.database.url === undefined ? undefined : service.database.name
    const ticksBefore = processTicks(service.proc!.pid)
    const dbTicksBefore = database === undefined ? undefined : backendTicks(database)
    const result = await runLoad({ url: service.url, connections, duration, requests: load })
    const cpuUs = cpuPerResponse(ticksBefore, processTicks(service.proc!.pid), result.responses)
    const dbCpuUs = database === undefined ? null : cpuPerResponse(dbTicksBefore, backendTicks(database), result.responses)
    const probed = await probe.result
    const others = stopCpu()
    describe(`tasks.list as ${tokens.length} users seeded through the API (beside the probe)`, { result, others })
    if (cpuUs !== null) log(`  GET /tasks: ${cpuUs} µs of the service's CPU per response` + (dbCpuUs === null ? '' : `, ${dbCpuUs} µs of its database backends'`))
    log(`  health.underLoad: ${probed.count} probes, p50 ${fmt(probed.p50, 2)} ms, p99 ${fmt(probed.p99, 2)} ms, max ${fmt(probed.max, 2)} ms, ${probed.failures} failed`)
    return { value: { ...probed, loadRps: result.rps, loadErrors: result.errors, loadCpuUs: cpuUs, loadDbCpuUs: dbCpuUs, users: tokens.length }, others }
  }, (r) => r.others).then((r) => r.value)
}
