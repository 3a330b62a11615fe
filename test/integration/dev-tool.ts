// A development tool of scripts/ (npm run stripe:dev, npm run mail:dev) as a child process, compiled
// like the server (scripts/test.ts), its output kept; killed at teardown.
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { ROOT } from '../support/paths.js'

export interface DevTool {
  output: () => string
  /** Resolves with the first match of `pattern` in the output, already there or yet to come. */
  waitFor: (pattern: RegExp, timeoutMs?: number) => Promise<RegExpExecArray>
}

export function startDevTool (t: { teardown: (fn: () => unknown) => void }, script: string, args: string[]): DevTool {
  const child = spawn(process.execPath, [join(ROOT, 'scripts', `${script}.js`), ...args], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '' },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  let output = ''
  child.stdout.on('data', (chunk) => { output += chunk })
  child.stderr.on('data', (chunk) => { output += chunk })
  t.teardown(() => { child.kill('SIGKILL') })
  return {
    output: () => output,
    async waitFor (pattern, timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs
      for (;;) {
        const match = pattern.exec(output)
        if (match) return match
        if (child.exitCode !== null) throw new Error(`${script} exited ${child.exitCode}: ${output}`)
        if (Date.now() > deadline) throw new Error(`${script}: no ${pattern} within ${timeoutMs} ms: ${output}`)
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
    }
  }
}
