// Child processes for the benchmark: the service and the two ceilings. Each is started
// directly (no npm in between), so its pid is the process whose memory is sampled.
import { spawn, type ChildProcess } from 'node:child_process'
import { readFileSync } from 'node:fs'
import net from 'node:net'

/** A port nobody listens on right now. */
export function freePort (): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer()
    server.unref()
    server.on('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      const port = typeof address === 'object' && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

export interface LogSummary {
  /** Lines at warn or above (pino JSON, or anything that is not JSON), by message. */
  byMessage: Map<string, { level: string, count: number, example: string }>
  total: number
}

const PINO_LEVELS: Record<number, string> = { 10: 'trace', 20: 'debug', 30: 'info', 40: 'warn', 50: 'error', 60: 'fatal' }

/** Collects what a child prints: a tail for crash reports and a count of warnings and errors. */
export class OutputCollector {
  readonly tail: string[] = []
  readonly summary: LogSummary = { byMessage: new Map(), total: 0 }
  private partial = ''

  feed (chunk: Buffer | string): void {
    const text = this.partial + chunk.toString()
    const lines = text.split('\n')
    this.partial = lines.pop() ?? ''
    for (const line of lines) this.line(line)
  }

  private line (line: string): void {
    if (line.trim() === '') return
    this.tail.push(line)
    if (this.tail.length > 60) this.tail.shift()
    // The event-loop probe's notes (which signal ended the process) are for the tail only.
    if (line.startsWith('bench probe:')) return
    let level = 'output'
    let message = line.slice(0, 200)
    try {
      const parsed = JSON.parse(line) as { level?: number, msg?: string, err?: { message?: string } }
      if (typeof parsed.level === 'number') {
        if (parsed.level < 40) return
        level = PINO_LEVELS[parsed.level] ?? String(parsed.level)
        message = [parsed.msg, parsed.err?.message].filter(Boolean).join(': ') || message
      }
    } catch {}
    const key = `${level}: ${message}`
    const entry = this.summary.byMessage.get(key)
    if (entry) entry.count++
    else this.summary.byMessage.set(key, { level, count: 1, example: line.slice(0, 600) })
    this.summary.total++
  }
}

export interface Managed {
  name: string
  child: ChildProcess
  pid: number
  output: OutputCollector
  /** Resolves with the exit code (or the signal's name) when the process ends. */
  exited: Promise<number | string>
  hasExited: () => boolean
  /** SIGTERM, then SIGKILL after `graceMs`. */
  stop: (graceMs?: number) => Promise<number | string>
}

export function startProcess (name: string, command: string, args: string[], options: { env: NodeJS.ProcessEnv, cwd: string }): Managed {
  const child = spawn(command, args, { env: options.env, cwd: options.cwd, stdio: ['ignore', 'pipe', 'pipe'] })
  const output = new OutputCollector()
  child.stdout?.on('data', (chunk: Buffer) => output.feed(chunk))
  child.stderr?.on('data', (chunk: Buffer) => output.feed(chunk))
  let done = false
  const exited = new Promise<number | string>((resolve) => {
    child.on('exit', (code, signal) => { done = true; resolve(code ?? signal ?? 'unknown') })
    child.on('error', (err) => { done = true; output.feed(`spawn error: ${err.message}\n`); resolve('spawn-error') })
  })
  if (child.pid === undefined) throw new Error(`${name}: could not start ${command}`)
  const pid = child.pid
  return {
    name,
    child,
    pid,
    output,
    exited,
    hasExited: () => done,
    async stop (graceMs = 15_000) {
      if (done) return exited
      child.kill('SIGTERM')
      const timer = setTimeout(() => { if (!done) child.kill('SIGKILL') }, graceMs)
      const code = await exited
      clearTimeout(timer)
      return code
    }
  }
}

/** Waits until `url` answers 200, or fails when the process exits or `timeoutMs` passes. */
export async function waitForHttp (url: string, proc: Managed, timeoutMs = 120_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (proc.hasExited()) {
      throw new Error(`${proc.name} exited (${String(await proc.exited)}) before answering ${url}:\n${proc.output.tail.join('\n')}`)
    }
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(2000) })
      await res.arrayBuffer()
      if (res.status === 200) return
    } catch {}
    // Start-up is measured to this answer: poll often enough not to add to it.
    await sleep(20)
  }
  throw new Error(`${proc.name} did not answer ${url} within ${timeoutMs} ms:\n${proc.output.tail.join('\n')}`)
}

/** Resident set size of a process in MB, from /proc (Linux); undefined when unavailable. */
export function rssMB (pid: number): number | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8')
    const match = /^VmRSS:\s+(\d+)\s+kB/m.exec(status)
    return match ? Number(match[1]) / 1024 : undefined
  } catch {
    return undefined
  }
}

/** Samples a process's RSS every 200 ms; windows give the peak over a stretch of time. */
export class RssSampler {
  private pid: number | undefined
  private timer: NodeJS.Timeout | undefined
  private windowPeak = 0
  overallPeak = 0
  /** Every sample since `record(true)`, for the soak. */
  private recording: Array<{ t: number, mb: number }> | undefined

  attach (pid: number): void {
    this.pid = pid
    if (this.timer === undefined) {
      this.timer = setInterval(() => this.sample(), 200)
      this.timer.unref()
    }
    this.sample()
  }

  sample (): number | undefined {
    if (this.pid === undefined) return undefined
    const mb = rssMB(this.pid)
    if (mb === undefined) return undefined
    if (mb > this.windowPeak) this.windowPeak = mb
    if (mb > this.overallPeak) this.overallPeak = mb
    this.recording?.push({ t: Date.now(), mb })
    return mb
  }

  beginWindow (): void {
    this.windowPeak = 0
    this.sample()
  }

  endWindow (): number {
    this.sample()
    return this.windowPeak
  }

  record (on: boolean): Array<{ t: number, mb: number }> {
    const samples = this.recording ?? []
    this.recording = on ? [] : undefined
    return samples
  }

  stop (): void {
    if (this.timer !== undefined) clearInterval(this.timer)
    this.timer = undefined
  }
}
