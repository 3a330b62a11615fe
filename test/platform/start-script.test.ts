// `npm start` and `npm run dev` as a newcomer meets them. A process manager, a container runtime
// or a terminal stops the service by signalling npm, which passes SIGTERM and SIGINT to its
// script's process only: the script runs under `sh -c`, and unless it execs its command the
// shell takes the signal, dies, and leaves the server running, orphaned. And `npm run dev`
// restarts when a route folder is added, not only when a file it already imported changes
// (autoload reads the folders; tsx watch sees imports). Run with package.json's own commands, in
// a scratch project holding only them, a link to node_modules and a stand-in server that
// listens and writes its pid: how npm runs the scripts is under test, not the server (its
// shutdown is test/integration/server.test.ts's).
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { existsSync, readdirSync, readFileSync, realpathSync } from 'node:fs'
import { mkdir, symlink, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { PROJECT_ROOT } from '../support/paths.js'

const { scripts } = JSON.parse(readFileSync(join(PROJECT_ROOT, 'package.json'), 'utf8')) as { scripts: { start: string, dev: string } }

const STAND_IN = `import { createServer } from 'node:http'
import { writeFileSync } from 'node:fs'
createServer().listen(0, '127.0.0.1', () => writeFileSync('server.pid', String(process.pid)))
`

const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/** The processes whose working directory is dir (Linux's /proc). */
function processesIn (dir: string): number[] {
  return readdirSync('/proc').filter((entry) => /^\d+$/.test(entry)).map(Number).filter((pid) => {
    try {
      return realpathSync(`/proc/${pid}/cwd`) === realpathSync(dir)
    } catch {
      return false
    }
  })
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

async function within<T> (ms: number, poll: () => T | undefined): Promise<T | undefined> {
  const deadline = Date.now() + ms
  for (let value = poll(); Date.now() < deadline; value = poll()) {
    if (value !== undefined) return value
    await sleep(50)
  }
  return poll()
}

/** A scratch project with package.json's start and dev scripts and the stand-in as dist/server.js and server.ts. */
async function scratchProject (t: Test): Promise<string> {
  const dir = t.testdir()
  await writeFile(join(dir, 'package.json'), JSON.stringify({ name: 'npm-scripts', private: true, type: 'module', scripts: { start: scripts.start, dev: scripts.dev } }))
  await symlink(join(PROJECT_ROOT, 'node_modules'), join(dir, 'node_modules'), 'dir')
  for (const folder of ['dist', 'routes', 'plugins', 'db/migrations']) await mkdir(join(dir, folder), { recursive: true })
  await writeFile(join(dir, 'dist/server.js'), STAND_IN)
  await writeFile(join(dir, 'server.ts'), STAND_IN)
  return dir
}

/** npm run <script> in dir; resolves once the stand-in listens, with its pid (read again for a restart). */
async function run (t: Test, dir: string, script: 'start' | 'dev'): Promise<{ npm: ChildProcess, exited: Promise<unknown>, serverPid: () => number | undefined }> {
  const npm = spawn('npm', ['run', script, '--silent'], { cwd: dir, env: { ...process.env, npm_config_update_notifier: 'false' }, stdio: 'ignore' })
  const exited = once(npm, 'exit')
  const pidFile = join(dir, 'server.pid')
  const serverPid = () => existsSync(pidFile) ? Number(readFileSync(pidFile, 'utf8')) || undefined : undefined
  const first = await within(30_000, serverPid)
  // Whatever a failing run left behind: every process still working in the scratch project.
  t.teardown(() => {
    if (npm.exitCode === null) npm.kill('SIGKILL')
    for (const pid of processesIn(dir)) process.kill(pid, 'SIGKILL')
  })
  t.ok(first, `npm run ${script} started the server`)
  return { npm, exited, serverPid }
}

for (const script of ['start', 'dev'] as const) {
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    t.test(`${signal} to npm run ${script} stops the server; no process is left`, async (t) => {
      const { npm, exited, serverPid } = await run(t, await scratchProject(t), script)
      const server = serverPid()!
      npm.kill(signal)
      // Before the scripts exec'd their command, SIGINT left npm waiting on a shell that waited on a server that never heard it.
      t.ok(await Promise.race([exited.then(() => true), sleep(10_000).then(() => false)]), 'npm exits')
      t.ok(await within(5000, () => alive(server) ? undefined : true), `the server got the ${signal} and is gone`)
    })
  }
}

t.test('npm run dev restarts when a route folder, a plugin or a migration is added', async (t) => {
  const dir = await scratchProject(t)
  const { npm, exited, serverPid } = await run(t, dir, 'dev')
  for (const file of ['routes/new-resource/index.ts', 'plugins/new-plugin.ts', 'db/migrations/2099-01-01T00-00-00_new.ts']) {
    const before = serverPid()
    await mkdir(join(dir, file, '..'), { recursive: true })
    await writeFile(join(dir, file), 'export default async function () {}\n')
    t.ok(await within(15_000, () => serverPid() !== before ? true : undefined), `${file}: restarted`)
  }
  npm.kill('SIGTERM')
  await exited
})
