// The HTTP transport on real loopback sockets, which app.inject never touches (it skips
// Node's HTTP parser, the server's timers and its connection count): answers given before
// any route runs are the envelope with the security headers and never echo the request
// (issue 12 row 13); every request's time and the number of connections are bounded (row 7).
import t, { type Test } from 'tap'
import Fastify from 'fastify'
import { SECURITY_HEADERS } from '../../plugins/response-headers.js'
import { serverOptions } from '../../server-options.js'
import { loadConfig } from '../../config.js'
import { build, TEST_SECRET } from '../support/helper.js'
import { exchange as exchangeWith, nextResponse, open as openTo, parse, within, type Answer } from '../support/raw-http.js'

const REQUEST_TIMEOUT_MS = 1000
const MAX_CONNECTIONS = 3

const app = await build(t, { REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS), MAX_CONNECTIONS: String(MAX_CONNECTIONS) })
await app.listen({ port: 0, host: '127.0.0.1' })
const { port } = app.server.address() as { port: number }
const open = () => openTo(port)
const exchange = (request: string) => exchangeWith(port, request)

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

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Waits until the server has no connection left open (it counts a closed one a moment later than the client). */
async function noConnectionsLeft (): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const count = await new Promise<number>((resolve, reject) => app.server.getConnections((err, n) => err ? reject(err) : resolve(n)))
    if (count === 0) return
    await sleep(20)
  }
  throw new Error('connections still open on the server')
}

t.test('a request trickled slower than REQUEST_TIMEOUT_MS is cut within it, with a 408 envelope', async (t) => {
  const body = JSON.stringify({ email: 'slow-client@example.com', password: 'correct horse battery staple' })
  for (const [label, head, trickled] of [
    ['body one byte at a time', `POST /auth/login HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`, body],
    ['headers one byte at a time', 'GET /health HTTP/1.1\r\n', `Host: localhost\r\nX-Slow: ${'s'.repeat(100)}\r\n\r\n`]
  ] as const) {
    await noConnectionsLeft()
    const conn = await open()
    const started = Date.now()
    conn.socket.write(head)
    let sent = 0
    const trickle = setInterval(() => { if (sent < trickled.length && conn.socket.writable) conn.socket.write(trickled[sent++]!) }, 200)
    const closedAt = await within(conn.closed, REQUEST_TIMEOUT_MS + 3000)
    clearInterval(trickle)
    conn.socket.destroy()
    t.ok(closedAt !== undefined, `${label}: cut (${closedAt === undefined ? `still open after ${Date.now() - started} ms` : `after ${closedAt - started} ms`}, ${sent} bytes trickled)`)
    if (closedAt === undefined) continue
    const elapsed = closedAt - started
    t.ok(elapsed >= REQUEST_TIMEOUT_MS - 50 && elapsed < REQUEST_TIMEOUT_MS + 1000, `${label}: within the setting (${elapsed} ms for ${REQUEST_TIMEOUT_MS} ms)`)
    assertEnvelope(t, parse(conn.received()), 'REQUEST_TIMEOUT', label)
  }
})

t.test('a normal request is unaffected; a kept-alive connection may idle longer than REQUEST_TIMEOUT_MS between requests', async (t) => {
  await noConnectionsLeft()
  const conn = await open()
  conn.socket.write('GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n')
  const first = await nextResponse(conn, 0)
  t.equal(first?.status, 200, 'first request')
  await sleep(REQUEST_TIMEOUT_MS * 1.5)
  const offset = conn.received().length
  const body = JSON.stringify({ email: 'nobody@example.com', password: 'correct horse battery staple' })
  conn.socket.write(`POST /auth/login HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`)
  const second = await nextResponse(conn, offset)
  t.equal(second?.status, 401, 'a second request with a body, on the same connection, is answered (401: no such user)')
  t.notOk(conn.socket.destroyed, 'and the connection stays open')
  conn.socket.destroy()
})

t.test('connections beyond MAX_CONNECTIONS are refused; the open ones keep working', async (t) => {
  await noConnectionsLeft()
  const health = 'GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n'
  const held = await Promise.all(Array.from({ length: MAX_CONNECTIONS }, () => open()))
  t.teardown(() => { for (const conn of held) conn.socket.destroy() })
  for (const conn of held) {
    conn.socket.write(health)
    t.equal((await nextResponse(conn, 0))?.status, 200, 'a connection within the limit is served')
  }

  const extra = await open()
  extra.socket.write(health)
  const closedAt = await within(extra.closed, 2000)
  extra.socket.destroy()
  t.ok(closedAt !== undefined, 'the connection over the limit is closed at once')
  t.equal(extra.received(), '', 'and gets no answer')

  for (const conn of held) {
    const offset = conn.received().length
    conn.socket.write(health)
    t.equal((await nextResponse(conn, offset))?.status, 200, 'the open connections keep working')
  }

  held[0]!.socket.destroy()
  await held[0]!.closed
  for (let i = 0; i < 100 && await new Promise<number>((resolve) => app.server.getConnections((_err, n) => resolve(n))) >= MAX_CONNECTIONS; i++) await sleep(20)
  const next = await open()
  next.socket.write(health)
  t.equal((await nextResponse(next, 0))?.status, 200, 'once one closes, a new connection is served')
  next.socket.destroy()
})

t.test('the transport settings reach the server; the defaults suit a service behind a load balancer', async (t) => {
  t.match(app.server, { requestTimeout: REQUEST_TIMEOUT_MS, maxConnections: MAX_CONNECTIONS }, 'the listening server has the settings')
  t.ok(app.server.headersTimeout <= app.server.requestTimeout, 'headers are due within the request timeout')

  const defaults = Fastify(serverOptions(loadConfig({ NODE_ENV: 'test', AUTH_JWT_SECRET: TEST_SECRET, DATA_DIR: t.testdir() })))
  t.teardown(() => defaults.close())
  t.match(defaults.server, { requestTimeout: 30_000, headersTimeout: 30_000, timeout: 60_000, keepAliveTimeout: 72_000, maxConnections: 1024 }, 'the defaults')
  t.ok((defaults.server as typeof defaults.server & { connectionsCheckingInterval: number }).connectionsCheckingInterval <= 1000, 'timeouts are checked at least every second, not every 30 s')
})

t.test('a bad transport setting stops start-up with one line naming the variable', async (t) => {
  const base = { NODE_ENV: 'test', AUTH_JWT_SECRET: TEST_SECRET, DATA_DIR: t.testdir() }
  for (const [env, line] of [
    [{ REQUEST_TIMEOUT_MS: '10' }, 'Invalid configuration: REQUEST_TIMEOUT_MS must be milliseconds from 1000 to 600000'],
    [{ CONNECTION_TIMEOUT_MS: 'soon' }, 'Invalid configuration: CONNECTION_TIMEOUT_MS must be milliseconds from 1000 to 600000'],
    [{ KEEP_ALIVE_TIMEOUT_MS: '0' }, 'Invalid configuration: KEEP_ALIVE_TIMEOUT_MS must be milliseconds from 1000 to 3600000'],
    [{ MAX_CONNECTIONS: '0' }, 'Invalid configuration: MAX_CONNECTIONS must be an integer from 1 to 100000']
  ] as const) {
    t.throws(() => loadConfig({ ...base, ...env }), { name: 'ConfigError', message: line }, line)
  }
})
