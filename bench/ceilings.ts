// The ceilings the service is measured against, each a bare Fastify in a child process
// (ceiling-hello.ts, ceiling-db.ts): framework (a hello-world), framework+headers (what
// GET /health answers, headers included) and database (GET /tasks's statements with plain
// pg, after the same token check). Each run starts a fresh one and stops it after.
import path from 'node:path'
import { processTicks } from './cpu.js'
import { databaseEnv } from './database.js'
import { runLoad } from './load.js'
import { describe, log } from './log.js'
import { BENCH_DIR, ROOT } from './paths.js'
import { freePort, rssMB, startProcess, waitForHttp } from './proc.js'
import { bearer, type RequestSets } from './requests.js'
import { cpuPerResponse, smoke, type Runs } from './runs.js'
import { baseEnv, tokenEnv, type Service } from './service.js'
import type { CeilingKind, CeilingRun, Options } from './types.js'

interface FirstPage { total: string | null, body: { data?: unknown[] } }

interface Parts {
  options: Options
  service: Service
  runs: Runs
  requests: RequestSets
  /** Whose first page of tasks the service and the database ceiling must answer alike. */
  readerToken: string
}

export class Ceilings {
  private constructor (
    private readonly parts: Parts,
    /** What the service answers to GET /tasks, to check the database ceiling does the same work. */
    private readonly reference: FirstPage,
    /** What GET /health answers besides the body, for the ceiling that answers the same. */
    private readonly healthHeaders: Record<string, string>
  ) {}

  /**
   * Reads what the ceilings must answer alike from the running service (with PGlite the
   * service is down while the database ceiling has the database).
   */
  static async capture (parts: Parts): Promise<Ceilings> {
    const url = parts.service.url
    const reference = await firstPage(url, parts.readerToken)
    const res = await fetch(`${url}/health`)
    await res.arrayBuffer()
    const skip = new Set(['date', 'content-length', 'content-type', 'connection', 'keep-alive'])
    const healthHeaders = Object.fromEntries([...res.headers].filter(([name]) => !skip.has(name)))
    return new Ceilings(parts, reference, healthHeaders)
  }

  /** Starts the ceiling, measures it (warm-up, quiet wait, window) and stops it. */
  async run (kind: CeilingKind, nodeArgs: string[] = []): Promise<CeilingRun> {
    const { options, service, runs, requests: sets } = this.parts
    const { connections, duration, warmup } = options
    const port = await freePort()
    const file = kind === 'database' ? 'ceiling-db.ts' : 'ceiling-hello.ts'
    const env = {
      ...baseEnv(),
      PORT: String(port),
      ...tokenEnv(),
      ...databaseEnv(service.database),
      ...(kind === 'framework+headers' && { RESPONSE_HEADERS: JSON.stringify(this.healthHeaders) })
    }
    const spawnedAt = Date.now()
    const proc = startProcess(`${kind} ceiling`, process.execPath, ['--import', 'tsx', ...nodeArgs, path.join(BENCH_DIR, file)], { env, cwd: ROOT })
    runs.children.push(proc)
    const base = `http://127.0.0.1:${port}`
    try {
      await waitForHttp(kind === 'database' ? `${base}/ready` : `${base}/`, proc, 60_000)
      const requests = kind === 'database' ? [sets.listTasks()] : [{ method: 'GET' as const, path: '/' }]
      const problem = await smoke(base, requests[0]!)
      if (problem !== undefined) log(`  ! ${kind} ceiling: a single request answered ${problem}`)
      if (kind === 'database') {
        // Same work as the service: the same page of the same user, the same counts.
        const a = this.reference
        const b = await firstPage(base, this.parts.readerToken)
        const same = a.total === b.total && JSON.stringify(a.body) === JSON.stringify(b.body)
        log(`  the database ceiling answers ${b.body.data?.length ?? 0} tasks, total ${b.total}: ${same ? 'identical to the service' : `DIFFERENT from the service (${a.body.data?.length ?? 0} tasks, total ${a.total})`}`)
      }
      if (warmup > 0) await runLoad({ url: base, connections, duration: warmup, requests })
      const stopCpu = await runs.settle()
      const from = Date.now()
      const ticksBefore = processTicks(proc.pid)
      const result = await runLoad({ url: base, connections, duration, requests })
      const cpuUs = cpuPerResponse(ticksBefore, processTicks(proc.pid), result.responses)
      const window = { from, to: Date.now() }
      const others = stopCpu()
      describe(`ceiling.${kind}`, { result, rssMB: rssMB(proc.pid), others })
      return { kind, result, window, spawnedAt, others, cpuUs }
    } finally {
      await proc.stop(5000)
      runs.children.splice(runs.children.indexOf(proc), 1)
    }
  }

  /**
   * run() beside the running service. The embedded database admits one process: with
   * PGlite the database ceiling opens it while the service is down.
   */
  async runBesideService (kind: CeilingKind): Promise<CeilingRun> {
    const { options, service } = this.parts
    if (kind !== 'database' || options.db === 'postgres') return this.run(kind)
    await service.stop()
    try {
      return await this.run(kind)
    } finally {
      await service.start()
    }
  }
}

async function firstPage (base: string, token: string): Promise<FirstPage> {
  const res = await fetch(`${base}/tasks`, { headers: bearer(token) })
  return { total: res.headers.get('x-total-count'), body: await res.json() as { data?: unknown[] } }
}
