// server.ts as a child process, the way production runs it: compiled (scripts/test.ts), with the
// node flags of `npm start`.
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { createServer } from 'node:net'
import { productionNodeFlags } from '../../production-flags.js'
import { PROJECT_ROOT, ROOT } from '../support/paths.js'

export async function freePort (): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as { port: number }
  server.close()
  await once(server, 'close')
  return port
}

export interface Running { child: ChildProcess, base: string, output: () => string, exited: Promise<number | null> }

/** `preload`: modules of the tests loaded into the server before it starts (node --import). */
export function startServer (env: Record<string, string>, preload: string[] = []): Running {
  const child = spawn(process.execPath, [...productionNodeFlags(PROJECT_ROOT), ...preload.flatMap((file) => ['--import', file]), 'server.js'], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', NODE_ENV: 'test', LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  let output = ''
  child.stdout?.on('data', (chunk) => { output += chunk })
  child.stderr?.on('data', (chunk) => { output += chunk })
  const exited = once(child, 'exit').then(([code]) => code as number | null)
  return { child, base: `http://127.0.0.1:${env.PORT}`, output: () => output, exited }
}

export async function waitUntilUp (server: Running): Promise<void> {
  const deadline = Date.now() + 60_000
  while (Date.now() < deadline) {
    try {
      const res = await fetch(`${server.base}/health`)
      if (res.ok) return
    } catch {}
    if (server.child.exitCode !== null) throw new Error(`server exited: ${server.output()}`)
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
  throw new Error(`server did not start: ${server.output()}`)
}
