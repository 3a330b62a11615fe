// The service with nothing to do: what it costs while no request arrives. A background job
// that polls too often (issue 30: the billing worker ran two statements every 10 ms, for
// ever, which took the embedded database's one connection between every request's
// queries) shows here first, in a run of seconds, on any machine: the CPU of the process
// (the embedded database's thread included) and, on PostgreSQL, of the backends serving
// its database.
//
// Two windows, one after the other, and the quieter one is the figure. A poll shows in both;
// what the last requests leave to finish does not repeat (CI once measured 7.0 % embedded in
// one window right after the sign-ins, where this machine measured 1.0–1.6 %; what ran was
// not found). Each window's threads are named, so a loud one says which.
import { readdirSync, readFileSync } from 'node:fs'
import { backendTicksByPid, processTicks, statTicks } from './cpu.js'
import { fmt, log, step } from './log.js'
import { sleep } from './proc.js'
import type { Service } from './service.js'

export interface IdleWindow {
  /** The service process's CPU time over the window, % of one core. */
  cpuPercent: number | null
  /** PostgreSQL's backends serving its database, % of one core (PostgreSQL only). */
  databaseCpuPercent: number | null
  /** The service's busiest threads over the window ("main", or the kernel's name), % of one core. */
  threads: Array<{ name: string, percent: number }>
}

export interface Idle extends IdleWindow {
  /** Each window's length. */
  seconds: number
  /** Both windows, in order; the figure above is the quieter one. */
  windows: IdleWindow[]
}

const percent = (ticks: number, seconds: number) => Math.round(1000 * ticks / (seconds * 100)) / 10

/** CPU ticks of each of the process's threads, by thread id. */
function threadTicks (pid: number): Map<string, { name: string, ticks: number }> {
  const threads = new Map<string, { name: string, ticks: number }>()
  let tids: string[] = []
  try { tids = readdirSync(`/proc/${pid}/task`) } catch { return threads }
  for (const tid of tids) {
    const ticks = statTicks(`/proc/${pid}/task/${tid}/stat`)
    if (ticks === undefined) continue
    let name = 'main'
    if (tid !== String(pid)) {
      try { name = readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim() } catch { continue }
    }
    threads.set(tid, { name, ticks })
  }
  return threads
}

async function window (pid: number, database: string | undefined, seconds: number): Promise<IdleWindow> {
  const before = { ticks: processTicks(pid), db: database === undefined ? undefined : backendTicksByPid(database), threads: threadTicks(pid) }
  await sleep(seconds * 1000)
  const ticks = processTicks(pid)
  let dbTicks = 0
  // Backend by backend: the pool may end one and open another within the window.
  if (database !== undefined) for (const [backend, now] of backendTicksByPid(database)) dbTicks += now - (before.db!.get(backend) ?? 0)
  const byName = new Map<string, number>()
  for (const [tid, t] of threadTicks(pid)) {
    const used = t.ticks - (before.threads.get(tid)?.ticks ?? 0)
    if (used > 0) byName.set(t.name, (byName.get(t.name) ?? 0) + used)
  }
  return {
    cpuPercent: before.ticks === undefined || ticks === undefined ? null : percent(ticks - before.ticks, seconds),
    databaseCpuPercent: database === undefined ? null : percent(dbTicks, seconds),
    threads: [...byName].sort((a, b) => b[1] - a[1]).slice(0, 4).map(([name, used]) => ({ name, percent: percent(used, seconds) }))
  }
}

/** A window's figure: the service's share and its database backends'; null when the service's could not be read. */
export const idleTotal = (w: IdleWindow): number | null => w.cpuPercent === null ? null : w.cpuPercent + (w.databaseCpuPercent ?? 0)

const describe = (w: IdleWindow) => `the service ${w.cpuPercent === null ? '—' : `${fmt(w.cpuPercent, 1)} %`} of a core` +
  (w.databaseCpuPercent === null ? '' : `, its database's backends ${fmt(w.databaseCpuPercent, 1)} %`) +
  (w.threads.length === 0 ? '' : ` (${w.threads.map((t) => `${t.name} ${fmt(t.percent, 1)}`).join(', ')})`)

export async function measureIdle (service: Service, seconds: number): Promise<Idle> {
  step(`the service idle for 2 × ${seconds} s`)
  await service.waitIdle()
  const pid = service.proc!.pid
  const database = service.database.url === undefined ? undefined : service.database.name
  const windows = [await window(pid, database, seconds), await window(pid, database, seconds)]
  for (const w of windows) log(`  idle: ${describe(w)}`)
  const quieter = windows.reduce((a, b) => (idleTotal(b) ?? Infinity) < (idleTotal(a) ?? Infinity) ? b : a)
  return { ...quieter, seconds, windows }
}
