// server.ts as a child process on a real socket: the transport's cut of a trickled body
// reaches the real server and its log (the in-process checks: test/platform/transport.test.ts).
import t from 'tap'
import { testDatabaseEnv, TEST_SECRET } from '../support/helper.js'
import { open, parse, within } from '../support/raw-http.js'
import { freePort, startServer, waitUntilUp } from './process.js'

const REQUEST_TIMEOUT_MS = 1000

t.test('server.ts cuts a trickled body as well; the log says so at info, not as a database failure', async (t) => {
  const serverPort = await freePort()
  const server = startServer({ PORT: String(serverPort), AUTH_JWT_SECRET: TEST_SECRET, REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS), ...await testDatabaseEnv(t) })
  t.teardown(() => { server.child.kill('SIGKILL') })
  await waitUntilUp(server)
  const conn = await open(serverPort)
  conn.socket.write('POST /auth/login HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{')
  const trickle = setInterval(() => { if (conn.socket.writable) conn.socket.write(' ') }, 200)
  const closedAt = await within(conn.closed, REQUEST_TIMEOUT_MS + 3000)
  clearInterval(trickle)
  conn.socket.destroy()
  t.ok(closedAt !== undefined, 'cut')
  t.equal(parse(conn.received()).status, 408, 'answered 408')
  server.child.kill('SIGTERM')
  t.equal(await server.exited, 0, 'exits cleanly')
  const lines = server.output().trim().split('\n').map((line) => JSON.parse(line) as { level: number, msg: string, code?: string })
  t.ok(lines.some((l) => l.level === 30 && l.code === 'REQUEST_TIMEOUT'), 'the cut is logged at info')
  t.same(lines.filter((l) => l.level >= 50).map((l) => l.msg), [], 'nothing at error level (the aborted body is no database failure)')
})
