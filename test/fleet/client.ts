// HTTP as the fleet's clients speak it: from a loopback address of their own (127.0.0.0/8 is all
// loopback on Linux), so the balancer sees, and appends to X-Forwarded-For, one address per
// simulated client; keep-alive connections per address, as browsers and API clients keep them.
import { Agent, request } from 'node:http'

export interface Answer {
  status: number
  headers: Record<string, string | string[] | undefined>
  body: string
}

export interface RequestOptions {
  method?: string
  headers?: Record<string, string>
  /** Sent as JSON. */
  json?: unknown
  /** Sent as it is (set content-type in headers). */
  body?: string
  timeoutMs?: number
}

/** One client address's connections. */
export class Client {
  readonly agent: Agent

  constructor (readonly address: string, maxSockets = 8) {
    this.agent = new Agent({ keepAlive: true, maxSockets, localAddress: address })
  }

  send (port: number, path: string, options: RequestOptions = {}): Promise<Answer> {
    const body = options.json === undefined ? options.body : JSON.stringify(options.json)
    const headers = { ...(options.json !== undefined && { 'content-type': 'application/json' }), ...options.headers }
    return new Promise((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, path, method: options.method ?? 'GET', headers, agent: this.agent }, (res) => {
        let text = ''
        res.setEncoding('utf8')
        res.on('data', (chunk: string) => { text += chunk })
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }))
        res.on('error', reject)
      })
      req.setTimeout(options.timeoutMs ?? 30_000, () => req.destroy(Object.assign(new Error('no answer in time'), { code: 'CLIENT_TIMEOUT' })))
      req.on('error', reject)
      req.end(body)
    })
  }

  close (): void {
    this.agent.destroy()
  }
}

/**
 * `count` loopback addresses in a block of their own, picked at random per run: the shared
 * Redis keeps rate-limit counters by address for a minute, and other runs on the machine must
 * not share them.
 */
export function clientAddresses (count: number): string[] {
  const second = 1 + Math.floor(Math.random() * 250)
  const third = Math.floor(Math.random() * 200)
  return Array.from({ length: count }, (_, i) => `127.${second}.${third + Math.floor(i / 250)}.${1 + (i % 250)}`)
}
