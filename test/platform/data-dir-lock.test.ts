// The embedded database's directory belongs to one process at a time (db/engine/data-dir-lock.ts):
// holders are real processes here; the records of holders that cannot be made to order (a
// reused pid, another host) are written as such a holder would have written them.
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { readdirSync, readFileSync, utimesSync, writeFileSync } from 'node:fs'
import { hostname } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { DataDirInUseError, lockDataDir, STALE_MS } from '../../db/engine/data-dir-lock.js'

const lockModule = new URL('../../db/engine/data-dir-lock.js', import.meta.url).href

interface Holder { child: ChildProcess, pid: number, said: string }

/**
 * Processes that try to take `dir`, each saying `locked` or why not, and keeping what they took
 * until killed. With `together`, all are started first, then told to go at the same moment.
 */
async function otherProcesses (t: Test, dir: string, count = 1, together = false): Promise<Holder[]> {
  const script = `const { lockDataDir } = await import(${JSON.stringify(lockModule)})
    if (process.argv[2] === 'together') await new Promise((resolve) => { console.log('ready'); process.stdin.once('data', resolve) })
    try { await lockDataDir(process.argv[1]); console.log('locked') } catch (err) { console.log(err.message) }
    setInterval(() => {}, 60_000)`
  const args = ['--input-type=module', '-e', script, dir, ...together ? ['together'] : []]
  const children = Array.from({ length: count }, () => {
    const child = spawn(process.execPath, args, { stdio: ['pipe', 'pipe', 'inherit'] })
    t.teardown(() => { child.kill('SIGKILL') })
    return { child, lines: child.stdout.setEncoding('utf8') }
  })
  if (together) {
    await Promise.all(children.map(({ lines }) => once(lines, 'data')))
    for (const { child } of children) child.stdin.write('go\n')
  }
  return Promise.all(children.map(async ({ child, lines }) => {
    const [line] = await once(lines, 'data') as [string]
    return { child, pid: child.pid!, said: line.trim() }
  }))
}
const otherProcess = async (t: Test, dir: string) => (await otherProcesses(t, dir))[0]!

async function kill (holder: Holder): Promise<void> {
  holder.child.kill('SIGKILL')
  await once(holder.child, 'exit')
}

const lockFiles = (parent: string) => readdirSync(parent).filter((name) => name.startsWith('pglite.lock')).sort()
const onlyLockFile = (parent: string) => {
  const files = lockFiles(parent)
  if (files.length !== 1) throw new Error(`expected one lock file, found ${files.join(', ')}`)
  return join(parent, files[0]!)
}
const readRecord = (file: string) => JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>

t.test('a directory held by another process is refused with its pid; released when that process is killed', async (t) => {
  const parent = t.testdir()
  const dir = join(parent, 'pglite')
  const holder = await otherProcess(t, dir)
  t.equal(holder.said, 'locked')
  const refused = await lockDataDir(dir).then(() => undefined, (err: unknown) => err)
  t.type(refused, DataDirInUseError)
  t.match((refused as Error).message, new RegExp(`^Data directory in use: the embedded database in ${dir} is held by process ${holder.pid} \\(.+\\) on host ${hostname()} since \\S+: stop it, or give this process another DATA_DIR$`))

  await kill(holder)
  const lock = await lockDataDir(dir)
  t.equal(readRecord(onlyLockFile(parent)).pid, process.pid, 'taken over: the dead holder\'s lock is replaced')
  await lock.release()
  t.same(lockFiles(parent), [], 'released: nothing left to be copied with the directory')
})

t.test('this process cannot take its own directory twice; a lock naming its pid that it did not take is from an earlier life', async (t) => {
  const parent = t.testdir()
  const dir = join(parent, 'pglite')
  const first = await lockDataDir(dir)
  await t.rejects(lockDataDir(dir), { code: 'DATA_DIR_IN_USE', message: new RegExp(`is held by this process \\(pid ${process.pid}\\)`) })
  const file = onlyLockFile(parent)
  const record = readRecord(file)
  await first.release()

  // As a container's pid 1 finds it after a crash and a restart.
  writeFileSync(file, JSON.stringify({ ...record, id: 'an-earlier-life' }))
  const again = await lockDataDir(dir)
  t.equal(readRecord(onlyLockFile(parent)).pid, process.pid)
  await again.release()
})

t.test('a lock naming a live pid that started at another time (a reused pid) is taken over', async (t) => {
  const parent = t.testdir()
  const dir = join(parent, 'pglite')
  const holder = await otherProcess(t, dir)
  const file = onlyLockFile(parent)
  writeFileSync(file, JSON.stringify({ ...readRecord(file), started: '1' }))
  const lock = await lockDataDir(dir)
  t.equal(readRecord(onlyLockFile(parent)).pid, process.pid)
  await lock.release()
  await kill(holder)
})

t.test('a holder elsewhere (another host or container) is judged by its refreshes: held while fresh, taken over once stale', async (t) => {
  const parent = t.testdir()
  const dir = join(parent, 'pglite')
  const file = join(parent, 'pglite.lock.4')
  writeFileSync(file, JSON.stringify({ id: 'x', pid: 1, host: 'elsewhere', command: 'server.js', since: '2026-11-25T10:00:00.000Z' }))
  await t.rejects(lockDataDir(dir), {
    message: `Data directory in use: the embedded database in ${dir} is held by process 1 (server.js) on host elsewhere since 2026-11-25T10:00:00.000Z: ` +
      `stop it, or give this process another DATA_DIR; a lock not refreshed for ${STALE_MS / 1000} s is taken over`
  })
  const past = new Date(Date.now() - STALE_MS - 1000)
  utimesSync(file, past, past)
  const lock = await lockDataDir(dir)
  t.same(lockFiles(parent), ['pglite.lock.5'], 'the next generation, the stale one removed')
  await lock.release()
})

t.test('a holder whose lock another process took over is told, and does not remove the new lock', async (t) => {
  const parent = t.testdir()
  const dir = join(parent, 'pglite')
  const lost: Error[] = []
  const lock = await lockDataDir(dir, { onLost: (err) => lost.push(err) })
  await lock.refresh()
  t.same(lost, [], 'not while it holds the directory')
  // What a process elsewhere writes when it judges this one gone (a paused container).
  writeFileSync(join(parent, 'pglite.lock.2'), JSON.stringify({ id: 'y', pid: 7, host: 'elsewhere', command: 'server.js', since: '2026-11-25T10:00:00.000Z' }))
  await lock.refresh()
  t.match(lost.map((err) => err.message), [`another process took over the embedded database in ${dir}: process 7 (server.js) on host elsewhere since 2026-11-25T10:00:00.000Z`])
  await lock.release()
  t.same(lockFiles(parent), ['pglite.lock.2'], 'its own lock goes, the new holder\'s stays')
})

t.test('of processes taking a dead holder\'s lock at once, exactly one gets it', async (t) => {
  const parent = t.testdir()
  const dir = join(parent, 'pglite')
  await kill(await otherProcess(t, dir))
  const contenders = await otherProcesses(t, dir, 6, true)
  const winners = contenders.filter((c) => c.said === 'locked')
  t.equal(winners.length, 1, 'one wins', { said: contenders.map((c) => c.said) })
  for (const loser of contenders.filter((c) => c.said !== 'locked')) {
    t.match(loser.said, `is held by process ${winners[0]?.pid} `, 'the others name the winner')
  }
  t.equal(readRecord(onlyLockFile(parent)).pid, winners[0]?.pid)
})

t.test('of many takers in one process at once, exactly one gets the directory', async (t) => {
  const parent = t.testdir()
  const dir = join(parent, 'pglite')
  writeFileSync(join(parent, 'pglite.lock.1'), JSON.stringify({ id: 'z', pid: 1, host: 'elsewhere', command: 'server.js', since: '2026-11-25T10:00:00.000Z' }))
  const past = new Date(Date.now() - STALE_MS - 1000)
  utimesSync(join(parent, 'pglite.lock.1'), past, past)
  // Started a little apart, so that each one's steps fall between the others'.
  const attempts = await Promise.allSettled(Array.from({ length: 20 }, async (_, i) => {
    await new Promise((resolve) => setTimeout(resolve, i % 7))
    return lockDataDir(dir)
  }))
  const taken = attempts.filter((a) => a.status === 'fulfilled')
  t.equal(taken.length, 1)
  t.ok(attempts.every((a) => a.status === 'fulfilled' || (a.reason as { code?: string }).code === 'DATA_DIR_IN_USE'), 'the others are refused')
  for (const a of taken) await a.value.release()
  t.same(lockFiles(parent), [])
})
