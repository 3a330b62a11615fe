// How much CPU other processes take while we measure (this machine may be shared):
// everything busy on the machine minus this benchmark, its children and the PostgreSQL
// processes serving the benchmark database. Linux /proc only; elsewhere it reports nothing.
import { readdirSync, readFileSync } from 'node:fs'

const TICKS_PER_SECOND = 100

function machineBusyTicks (): number | undefined {
  try {
    const cpu = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number)
    // user nice system idle iowait irq softirq steal
    const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = cpu
    return user + nice + system + irq + softirq + steal
  } catch {
    return undefined
  }
}

/** User and system ticks of a `/proc` stat file: a process's (`/proc/<pid>/stat`) or one of its threads' (`/proc/<pid>/task/<tid>/stat`). */
export function statTicks (file: string): number | undefined {
  try {
    const fields = readFileSync(file, 'utf8').split(') ')[1]?.split(' ') ?? []
    return Number(fields[11]) + Number(fields[12])
  } catch {
    return undefined
  }
}

export const processTicks = (pid: number): number | undefined => statTicks(`/proc/${pid}/stat`)

/**
 * PostgreSQL processes that are ours: backends of `database`, and (unless `backendsOnly`) the
 * server's own helpers.
 */
function postgresPids (database: string | undefined, backendsOnly = false): number[] {
  if (database === undefined) return []
  const pids: number[] = []
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() !== 'postgres') continue
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8').replace(/\0/g, ' ')
      // Backends read "postgres: <user> <database> <client> <state>"; helpers "postgres: checkpointer" etc.
      const backend = /^postgres: \S+ (\S+) \S+/.exec(cmdline)
      if (backend === null ? !backendsOnly : cmdline.includes(` ${database} `)) pids.push(Number(entry))
    } catch {}
  }
  return pids
}

/** CPU ticks of the PostgreSQL backends serving `database` (the server's own helpers left out). */
export function backendTicks (database: string): number {
  return postgresPids(database, true).reduce((sum, pid) => sum + (processTicks(pid) ?? 0), 0)
}

/** The same, by backend: a window's use is each backend's ticks less its own at the start (a backend that ended meanwhile counts nothing, never less than nothing). */
export function backendTicksByPid (database: string): Map<number, number> {
  return new Map(postgresPids(database, true).map((pid) => [pid, processTicks(pid) ?? 0]))
}

export class CpuWatch {
  constructor (private readonly ours: () => number[], private readonly database: string | undefined) {}

  private snapshot (): { busy: number, ours: Map<number, number> } | undefined {
    const busy = machineBusyTicks()
    if (busy === undefined) return undefined
    const ours = new Map<number, number>()
    for (const pid of [process.pid, ...this.ours(), ...postgresPids(this.database)]) {
      const ticks = processTicks(pid)
      if (ticks !== undefined) ours.set(pid, ticks)
    }
    return { busy, ours }
  }

  /** Starts a window; the function it returns gives the cores other processes used over it. */
  start (): () => number | undefined {
    const before = this.snapshot()
    const startedAt = Date.now()
    return () => {
      const after = this.snapshot()
      if (before === undefined || after === undefined) return undefined
      let oursTicks = 0
      for (const [pid, ticks] of after.ours) oursTicks += ticks - (before.ours.get(pid) ?? 0)
      const seconds = (Date.now() - startedAt) / 1000
      return Math.max(0, (after.busy - before.busy - oursTicks) / TICKS_PER_SECOND / seconds)
    }
  }

  /**
   * Waits (up to `maxSeconds`) until other processes use under `threshold` cores over a
   * half second; returns how long it waited and what they used last.
   */
  async quiet (maxSeconds: number, threshold = 0.25): Promise<{ waited: number, others: number | undefined }> {
    const startedAt = Date.now()
    let others: number | undefined
    do {
      const stop = this.start()
      await new Promise((resolve) => setTimeout(resolve, 500))
      others = stop()
      if (others === undefined || others < threshold) break
    } while (Date.now() - startedAt < maxSeconds * 1000)
    return { waited: (Date.now() - startedAt) / 1000, others }
  }
}
