// Raw HTTP/1.1 over a loopback socket, for what app.inject cannot show: the server's own
// parser, timers and connection limit (test/platform/transport.test.ts, test/integration/server.test.ts).
import { once } from 'node:events'
import { connect, type Socket } from 'node:net'

export interface Answer { status: number, headers: Record<string, string>, body: string, raw: string }

export function parse (raw: string): Answer {
  const end = raw.indexOf('\r\n\r\n')
  const [statusLine = '', ...lines] = raw.slice(0, end === -1 ? raw.length : end).split('\r\n')
  const headers: Record<string, string> = {}
  for (const line of lines) {
    const colon = line.indexOf(':')
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim()
  }
  return { status: Number(/^HTTP\/1\.1 (\d{3})/.exec(statusLine)?.[1] ?? 0), headers, body: end === -1 ? '' : raw.slice(end + 4), raw }
}

/** A connection whose received bytes are collected; `closed` settles when the server ends it. */
export interface Connection { socket: Socket, received: () => string, closed: Promise<number> }

export async function open (to: number): Promise<Connection> {
  const socket = connect({ port: to, host: '127.0.0.1' })
  let data = ''
  socket.setEncoding('latin1')
  socket.on('data', (chunk: string) => { data += chunk })
  socket.on('error', () => {})
  const closed = new Promise<number>((resolve) => socket.once('close', () => resolve(Date.now())))
  await once(socket, 'connect')
  return { socket, received: () => data, closed }
}

/** Resolves with the value, or with `undefined` once `ms` have passed. */
export const within = <T>(promise: Promise<T>, ms: number): Promise<T | undefined> =>
  Promise.race([promise, new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), ms))])

/** Sends one request in one write and reads until the server closes the connection. */
export async function exchange (port: number, request: string): Promise<Answer> {
  const conn = await open(port)
  conn.socket.write(request)
  const closedAt = await within(conn.closed, 5000)
  conn.socket.destroy()
  if (closedAt === undefined) throw new Error(`no close within 5 s; received: ${conn.received().slice(0, 300)}`)
  return parse(conn.received())
}

/** Reads one response off a kept-alive connection (headers plus content-length bytes of body). */
export async function nextResponse (conn: Connection, from: number, ms = 5000): Promise<Answer | undefined> {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    const raw = conn.received().slice(from)
    const answer = parse(raw)
    const length = Number(answer.headers['content-length'] ?? NaN)
    if (raw.includes('\r\n\r\n') && Buffer.byteLength(answer.body, 'latin1') >= length) return answer
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  return undefined
}
