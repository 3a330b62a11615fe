// The service with nothing to do: what it costs while no request arrives. A background job
// that polls too often (issue 30: the billing worker ran two statements every 10 ms, for
// ever, which took the embedded database's one connection between every request's
// queries) shows here first, in a run of seconds, on any machine: the CPU of the process
// (the embedded database's thread included) and, on PostgreSQL, of the backends serving
// its database.
import { backendTicks, processTicks } from './cpu.js'
import { fmt, log, step } from './log.js'
import { sleep } from './proc.js'
import type { Service } from './service.js'

export interface Idle {
  seconds: number
  /** The service process's CPU time over the window, % of one core. */
  cpuPercent: number | null
  /** PostgreSQL's backends serving its database, % of one core (PostgreSQL only). */
  databaseCpuPercent: number | null
}

const percent = (ticks: number, seconds: number) => Math.round(1000 * ticks / (seconds * 100)) / 10

export async function measureIdle (service: Service, seconds: number): Promise<Idle> {
  step(`the service idle for ${seconds} s`)
  await service.waitIdle()
  const pid = service.proc!.pid
  const database = service.database.url === undefined ? undefined : service.database.name
  const before = { ticks: processTicks(pid), db: database === undefined ? 0 : backendTicks(database) }
  await sleep(seconds * 1000)
  const ticks = processTicks(pid)
  const cpuPercent = before.ticks === undefined || ticks === undefined ? null : percent(ticks - before.ticks, seconds)
  const databaseCpuPercent = database === undefined ? null : percent(backendTicks(database) - before.db, seconds)
  log(`  idle: the service ${cpuPercent === null ? '—' : `${fmt(cpuPercent, 1)} %`} of a core` +
    (databaseCpuPercent === null ? '' : `, its database's backends ${fmt(databaseCpuPercent, 1)} %`))
  return { seconds, cpuPercent, databaseCpuPercent }
}
