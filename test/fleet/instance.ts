// One instance of the built service as production runs it: `node <the flags of npm start>
// dist/server.js` (npm run test:fleet builds first), with the fleet's environment.
import { spawn, type ChildProcess } from 'node:child_process'
import { productionNodeFlags } from '../../production-flags.js'
import { PROJECT_ROOT } from '../support/paths.js'
import { track } from './children.js'

export interface Instance {
  name: string
  port: number
  child: ChildProcess
  /** Resolves when the process has ended, with the time that was seen and its code or signal. */
  exited: Promise<{ at: number, code: number | null, signal: NodeJS.Signals | null }>
  /** The `msg` of every line it logged, in order, with the migration lines' names. */
  messages: () => string[]
  /** Lines logged at error or fatal, and anything that is not a log line. */
  errors: () => string[]
  tail: () => string
}

export function startInstance (name: string, port: number, env: Record<string, string>): Instance {
  const child = track(spawn(process.execPath, [...productionNodeFlags(PROJECT_ROOT), 'dist/server.js'], {
    cwd: PROJECT_ROOT,
    env: { PATH: process.env.PATH ?? '', ...env, PORT: String(port) },
    stdio: ['ignore', 'pipe', 'pipe']
  }))
  const messages: string[] = []
  const errors: string[] = []
  let tail = ''
  let partial = ''
  const read = (chunk: Buffer) => {
    const text = partial + chunk.toString('utf8')
    tail = (tail + text).slice(-20_000)
    const lines = text.split('\n')
    partial = lines.pop() ?? ''
    for (const line of lines) {
      if (line === '') continue
      let entry: { level?: number, msg?: string, migration?: string }
      try {
        entry = JSON.parse(line)
      } catch {
        errors.push(line)
        continue
      }
      // Requests are logged one line each: only what says something about the process is kept.
      if (entry.msg === 'request completed' || entry.msg === 'request') continue
      messages.push(entry.migration ? `${entry.msg}: ${entry.migration}` : entry.msg ?? '')
      if ((entry.level ?? 0) >= 50) errors.push(line)
    }
  }
  child.stdout!.on('data', read)
  child.stderr!.on('data', read)
  const exited = new Promise<{ at: number, code: number | null, signal: NodeJS.Signals | null }>((resolve) => {
    child.once('exit', (code, signal) => resolve({ at: Date.now(), code, signal }))
  })
  return { name, port, child, exited, messages: () => messages, errors: () => errors, tail: () => tail }
}

/** Polls /ready on the instance itself until it answers 200. */
export async function waitUntilReady (instance: Instance, timeoutMs = 120_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const ok = await fetch(`http://127.0.0.1:${instance.port}/ready`).then((res) => res.ok, () => false)
    if (ok) return
    if (instance.child.exitCode !== null) throw new Error(`${instance.name} exited: ${instance.tail()}`)
    if (Date.now() > deadline) throw new Error(`${instance.name} not ready within ${timeoutMs} ms: ${instance.tail()}`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}
