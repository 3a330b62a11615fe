// The HTTP transport on real loopback sockets, which app.inject never touches (it skips
// Node's HTTP parser, the server's timers and its connection count): answers given before
// any route runs are the envelope with the security headers and never echo the request
// (issue 12 row 13); every request's time and the number of connections are bounded (row 7).
import { once } from 'node:events'
import { connect, type Socket } from 'node:net'
import t, { type Test } from 'tap'
import { SECURITY_HEADERS } from '../plugins/response-headers.js'
import { build } from './helper.js'

const REQUEST_TIMEOUT_MS = 1000
const MAX_CONNECTIONS = 3

const app = await build(t, { REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS), MAX_CONNECTIONS: String(MAX_CONNECTIONS) })
await app.listen({ port: 0, host: '127.0.0.1' })
const { port } = app.server.address() as { port: number }

interface Answer { status: number, headers: Record<string, string>, body: string, raw: string }

function parse (raw: string): Answer {
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
interface Connection { socket: Socket, received: () => string, closed: Promise<number>, openedAt: number }

async function open (): Promise<Connection> {
  const socket = connect({ port, host: '127.0.0.1' })
  let data = ''
  socket.setEncoding('latin1')
  socket.on('data', (chunk: string) => { data += chunk })
  socket.on('error', () => {})
  const closed = once(socket, 'close').then(() => Date.now())
  await once(socket, 'connect')
  return { socket, received: () => data, closed, openedAt: Date.now() }
}

/** Resolves with the value, or with `undefined` once `ms` have passed. */
const within = <T>(promise: Promise<T>, ms: number): Promise<T | undefined> =>
  Promise.race([promise, new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), ms))])

/** Sends one request in one write and reads until the server closes the connection. */
async function exchange (request: string): Promise<Answer> {
  const conn = await open()
  conn.socket.write(request)
  const closedAt = await within(conn.closed, 5000)
  conn.socket.destroy()
  if (closedAt === undefined) throw new Error(`no close within 5 s; received: ${conn.received().slice(0, 300)}`)
  return parse(conn.received())
}

/** What each refusal answers: status, `error`, `code`. */
const REFUSALS = {
  URI_TOO_LONG: [414, 'URI too long'],
  HEADERS_TOO_LARGE: [431, 'Request headers too large'],
  BAD_REQUEST: [400, 'Bad request'],
  REQUEST_TIMEOUT: [408, 'Request timeout']
} as const

function assertEnvelope (t: Test, answer: Answer, code: keyof typeof REFUSALS, label: string) {
  const [status, error] = REFUSALS[code]
  t.equal(answer.status, status, `${label}: status ${status} (got ${JSON.stringify(answer.raw.slice(0, 160))})`)
  t.match(answer.headers['content-type'], /^application\/json(;|$)/, `${label}: content-type application/json`)
  let body: unknown
  try { body = JSON.parse(answer.body) } catch { body = answer.body }
  t.same(body, { success: false, error, code }, `${label}: the envelope`)
  t.match(answer.headers, { ...SECURITY_HEADERS, 'x-request-id': /^[0-9a-f-]{36}$/ }, `${label}: the security headers and a request id`)
}

t.test('answers before routing are the envelope with the security headers, and never echo the request', async (t) => {
  const longId = '7'.repeat(300)
  const tooLong = await exchange(`GET /tasks/${longId} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n`)
  assertEnvelope(t, tooLong, 'URI_TOO_LONG', 'path parameter over the router limit')
  t.notOk(tooLong.raw.includes(longId.slice(0, 100)), 'the 414 does not echo the URL')

  const hugeValue = 'h'.repeat(20_000)
  const tooLarge = await exchange(`GET /health HTTP/1.1\r\nHost: localhost\r\nX-Filler: ${hugeValue}\r\n\r\n`)
  assertEnvelope(t, tooLarge, 'HEADERS_TOO_LARGE', 'headers over the parser limit')
  t.notOk(tooLarge.raw.includes(hugeValue.slice(0, 100)), 'the 431 does not echo the header')

  const malformed = await exchange('GET /health HTTP/1.1\r\nHost: localhost\r\nBad Header Secret-Token\r\n\r\n')
  assertEnvelope(t, malformed, 'BAD_REQUEST', 'a header line the parser refuses')
  t.notOk(malformed.raw.includes('Secret-Token'), 'the 400 does not echo the request')

  const badEncoding = await exchange('GET /tasks/%E0%A4%Asecret HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n')
  assertEnvelope(t, badEncoding, 'BAD_REQUEST', 'a path the router cannot decode')
  t.notOk(badEncoding.raw.includes('secret'), 'the 400 does not echo the URL')
})
