// `npm start` and signals: a process manager, a container runtime or a terminal stops the
// service by signalling npm, which passes SIGTERM and SIGINT to its script's process only. The
// script runs under `sh -c`; unless it execs node, the shell takes the signal, dies, and leaves
// the server running, orphaned. Run with package.json's own start command, in a copy of the
// project holding only that script and a dist/server.js stand-in that listens and waits: the
// way npm runs the script is what is under test, not the server's shutdown (that is
// test/integration/server.test.ts's).
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { existsSync, readFileSync } from 'node:fs'
import { mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import t from 'tap'
import { PROJECT_ROOT } from '../support/paths.js'

const { scripts } = JSON.parse(readFileSync(join(PROJECT_ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } }

const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

async function gone (pid: number, withinMs: number): Promise<boolean> {
  const deadline = Date.now() + withinMs
  while (alive(pid) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50))
  return !alive(pid)
}

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  t.test(`${signal} to npm start stops the server; no process is left`, async (t) => {
    const dir = t.testdir()
    await writeFile(join(dir, 'package.json'), JSON.stringify({ name: 'start-script', private: true, type: 'module', scripts: { start: scripts.start } }))
    await mkdir(join(dir, 'dist'))
    // Writes its pid once it listens, as the server would be listening.
    await writeFile(join(dir, 'dist/server.js'), `import { createServer } from 'node:http'
import { writeFileSync } from 'node:fs'
createServer().listen(0, '127.0.0.1', () => writeFileSync('server.pid', String(process.pid)))
`)
    const npm = spawn('npm', ['start', '--silent'], { cwd: dir, env: { ...process.env, npm_config_update_notifier: 'false' }, stdio: 'ignore' })
    const exited = once(npm, 'exit')
    const pidFile = join(dir, 'server.pid')
    const deadline = Date.now() + 30_000
    while (!existsSync(pidFile) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50))
    t.teardown(() => { if (npm.exitCode === null) npm.kill('SIGKILL') })
    const server = Number(readFileSync(pidFile, 'utf8'))
    t.teardown(() => { if (alive(server)) process.kill(server, 'SIGKILL') })
    t.not(server, npm.pid, 'the server is a process of its own')

    npm.kill(signal)
    // Before npm start exec'd node, SIGINT left npm waiting on a shell that waited on a server that never heard it.
    const npmExited = await Promise.race([exited.then(() => true), new Promise<false>((resolve) => setTimeout(resolve, 10_000, false))])
    t.ok(npmExited, 'npm exits')
    t.ok(await gone(server, 5000), `the server got the ${signal} and is gone`)
  })
}
