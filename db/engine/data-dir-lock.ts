// One process at a time on an embedded database's directory: two PGlite instances writing the
// same files lose data silently (an account registered on one was gone after a restart).
//
// The lock is a file beside the directory, `<dir>.lock.<generation>`, naming its holder. It is
// created whole (written under a private name, then hard-linked into place, which fails if the
// name exists), so a reader never sees half a record. A lock whose holder is gone is not
// deleted and re-created (two processes doing that at once can both win): the next process
// creates the next generation, which only one can, and a holder is the one whose generation is
// the highest once its own is in place. Lower generations are removed by the winner.
//
// Whether a holder is alive: on this machine and in this pid namespace, its pid runs and
// started when the record says (so a reused pid is not mistaken for it; a lock naming this very
// pid that this process did not take is its own from an earlier life, as for pid 1 in a
// container). From elsewhere (another container sharing the volume, another host), no pid can
// be checked: the holder refreshes the file's modification time every REFRESH_MS, and a lock
// left unrefreshed for STALE_MS is taken over.
import { randomUUID } from 'node:crypto'
import { readFileSync, readlinkSync, rmSync } from 'node:fs'
import { link, readdir, readFile, rm, stat, utimes, writeFile } from 'node:fs/promises'
import { hostname } from 'node:os'
import { basename, dirname, join, resolve } from 'node:path'
import { StartRefusal } from '../../errors.js'

/** How often a holder refreshes its lock file. */
export const REFRESH_MS = 5_000
/** A lock not refreshed for this long, by a holder that cannot be checked by pid, is taken over. */
export const STALE_MS = 20_000

/** Another process holds the directory: start-up stops with this one line. */
export class DataDirInUseError extends StartRefusal {
  readonly code = 'DATA_DIR_IN_USE'
}

/** What a lock file says about its holder. */
interface Holder {
  /** This acquisition, so that a process tells its own locks from a same-pid predecessor's. */
  id: string
  pid: number
  host: string
  /** The kernel's boot, and the pid namespace: where `pid` means this process (Linux). */
  boot?: string
  pidns?: string
  /** The process's start time in clock ticks since boot (Linux): tells a reused pid apart. */
  started?: string
  /** The script it runs (server.js, migrate.ts …), for the operator reading the refusal. */
  command: string
  since: string
}

export interface DataDirLock {
  /** Refreshes the file; finds out whether the lock was taken away (then onLost is called). Runs every REFRESH_MS. */
  refresh: () => Promise<void>
  /** Removes the lock file if it is still this process's. Never throws. */
  release: () => Promise<void>
}

export interface LockOptions {
  /** Another process took the directory over (this one was judged gone): stop using it. */
  onLost?: (err: Error) => void
}

// The ids of this process's locks, also while being taken: a lock naming this pid is ours
// only if its id is here.
const ownIds = new Set<string>()
// Removed synchronously when the process exits without closing the database.
const heldFiles = new Map<string, string>()
process.once('exit', () => {
  for (const [file, content] of heldFiles) removeIfSync(file, content)
})

const procText = (path: string): string | undefined => {
  try {
    return readFileSync(path, 'utf8')
  } catch {
    return undefined
  }
}
const here = {
  host: hostname(),
  boot: procText('/proc/sys/kernel/random/boot_id')?.trim(),
  pidns: (() => {
    try {
      return readlinkSync('/proc/self/ns/pid')
    } catch {
      return undefined
    }
  })()
}

/** The state and start time of a pid (Linux); undefined where /proc does not show it. */
function processStat (pid: number): { state: string, started: string } | undefined {
  const text = procText(`/proc/${pid}/stat`)
  if (text === undefined) return undefined
  // Fields after the command, which is in parentheses and may hold anything.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ')
  return { state: fields[0] ?? '', started: fields[19] ?? '' }
}

function isRunning (pid: number, started: string | undefined): boolean {
  try {
    process.kill(pid, 0)
  } catch (err) {
    // EPERM: it runs, as another user.
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return false
  }
  const stat = processStat(pid)
  // It exists, and /proc says no more (none, or hidden by hidepid): held, as far as can be told.
  if (stat === undefined) return true
  // A zombie (killed, not yet reaped by its parent) writes nothing any more.
  if (stat.state === 'Z' || stat.state === 'X') return false
  return started === undefined || stat.started === started
}

const same = (a: string | undefined, b: string | undefined) => a === undefined || b === undefined || a === b
const checkableByPid = (holder: Holder) => holder.host === here.host && same(holder.boot, here.boot) && same(holder.pidns, here.pidns)

function holds (holder: Holder | undefined, modifiedMs: number): boolean {
  if (holder !== undefined && checkableByPid(holder)) {
    return holder.pid === process.pid ? ownIds.has(holder.id) : isRunning(holder.pid, holder.started)
  }
  return Date.now() - modifiedMs < STALE_MS
}

function parseHolder (text: string): Holder | undefined {
  try {
    const holder = JSON.parse(text) as Partial<Holder>
    if (typeof holder.id !== 'string' || !Number.isSafeInteger(holder.pid) || (holder.pid ?? 0) <= 0 || typeof holder.host !== 'string') return undefined
    return holder as Holder
  } catch {
    return undefined
  }
}

/** Who holds a lock, for a person reading the log. */
function holderText (holder: Holder | undefined): string {
  if (holder === undefined) return 'a process whose lock file cannot be read'
  const who = holder.pid === process.pid && ownIds.has(holder.id) ? `this process (pid ${holder.pid})` : `process ${holder.pid} (${holder.command})`
  return `${who} on host ${holder.host} since ${holder.since}`
}

function refusal (dir: string, holder: Holder | undefined): string {
  const takenOver = holder === undefined || !checkableByPid(holder) ? `; a lock not refreshed for ${STALE_MS / 1000} s is taken over` : ''
  return `Data directory in use: the embedded database in ${dir} is held by ${holderText(holder)}: stop it, or give this process another DATA_DIR${takenOver}`
}

function removeIfSync (file: string, content: string): void {
  try {
    if (readFileSync(file, 'utf8') === content) rmSync(file, { force: true })
  } catch {}
}

/**
 * Takes the directory `dir` for this process, or throws DataDirInUseError naming the process
 * that holds it. A lock left by a process that is gone is taken over.
 */
export async function lockDataDir (dir: string, options: LockOptions = {}): Promise<DataDirLock> {
  const absolute = resolve(dir)
  const parent = dirname(absolute)
  const prefix = `${basename(absolute)}.lock.`
  const fileOf = (generation: number) => join(parent, `${prefix}${generation}`)
  const generations = async () => (await readdir(parent))
    .filter((name) => name.startsWith(prefix) && /^\d+$/.test(name.slice(prefix.length)))
    .map((name) => Number(name.slice(prefix.length)))
    .sort((a, b) => a - b)

  const started = processStat(process.pid)
  const holder: Holder = {
    id: randomUUID(),
    pid: process.pid,
    ...here,
    ...started ? { started: started.started } : {},
    command: basename(process.argv[1] ?? process.argv0),
    since: new Date().toISOString()
  }
  const content = JSON.stringify(holder)
  const draft = join(parent, `${prefix}${holder.id}.draft`)
  await writeFile(draft, content)
  ownIds.add(holder.id)
  let generation: number | undefined
  try {
    // Each pass ends in a refusal, a lock, or a change another process made meanwhile (bounded).
    for (let pass = 0; generation === undefined; pass++) {
      if (pass === 100) throw new Error(`could not lock ${absolute}: too many concurrent attempts`)
      const top = (await generations()).at(-1)
      if (top !== undefined) {
        const found = await readLock(fileOf(top))
        // Gone meanwhile: released, or removed by the process that took it over.
        if (found === undefined) continue
        if (holds(found.holder, found.modifiedMs)) throw new DataDirInUseError(refusal(absolute, found.holder))
      }
      const mine = (top ?? 0) + 1
      try {
        await link(draft, fileOf(mine))
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'EEXIST') continue
        throw err
      }
      // A process that took over a later generation meanwhile wins; ours goes.
      const after = await generations()
      if (after.at(-1) !== mine) {
        await rm(fileOf(mine), { force: true })
        continue
      }
      for (const older of after.filter((g) => g < mine)) await rm(fileOf(older), { force: true })
      generation = mine
    }
  } catch (err) {
    ownIds.delete(holder.id)
    throw err
  } finally {
    await rm(draft, { force: true })
  }

  const held = generation
  const file = fileOf(held)
  heldFiles.set(file, content)
  let lost = false
  const loseTo = async (top: number) => {
    lost = true
    clearInterval(timer)
    const found = await readLock(fileOf(top)).catch(() => undefined)
    options.onLost?.(new Error(`another process took over the embedded database in ${absolute}: ${holderText(found?.holder)}`))
  }
  const refresh = async () => {
    if (lost) return
    try {
      const top = (await generations()).at(-1)
      if (top !== undefined && top > held) return await loseTo(top)
      const now = new Date()
      await utimes(file, now, now).catch(async (err: NodeJS.ErrnoException) => {
        // Removed by hand: put back, unless another process took this generation.
        if (err.code !== 'ENOENT') throw err
        await writeFile(file, content, { flag: 'wx' })
      })
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') return await loseTo(held)
      // A passing I/O error: the next refresh tries again, well within STALE_MS.
    }
  }
  const timer = setInterval(() => { refresh().catch(() => {}) }, REFRESH_MS).unref()
  let released = false
  return {
    refresh,
    release: async () => {
      if (released) return
      released = true
      clearInterval(timer)
      heldFiles.delete(file)
      ownIds.delete(holder.id)
      const text = await readFile(file, 'utf8').catch(() => undefined)
      if (text === content) await rm(file, { force: true }).catch(() => {})
    }
  }
}

/** A lock file's holder (undefined if its record cannot be read) and when it was last refreshed; undefined if there is no such file. */
async function readLock (file: string): Promise<{ holder: Holder | undefined, modifiedMs: number } | undefined> {
  try {
    const [text, info] = await Promise.all([readFile(file, 'utf8'), stat(file)])
    return { holder: parseHolder(text), modifiedMs: info.mtimeMs }
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw err
  }
}
