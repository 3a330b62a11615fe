// One address holds at most MAX_CONNECTIONS_PER_ADDRESS of the server's connections, so one
// client's idle sockets cannot take /health away from everyone; the trusted proxies, which
// carry every client's connections, are not held to it. Real sockets from several loopback
// addresses (127.0.0.0/8 is all loopback on Linux).
import { once } from 'node:events'
import { connect } from 'node:net'
import t from 'tap'
import { build } from '../support/helper.js'
import { within } from '../support/raw-http.js'

const SHARE = 4

async function listening (env: Record<string, string>): Promise<number> {
  const app = await build(t, { MAX_CONNECTIONS_PER_ADDRESS: String(SHARE), ...env })
  await app.listen({ port: 0, host: '127.0.0.1' })
  return (app.server.address() as { port: number }).port
}

interface Client { answered: () => Promise<string>, closed: Promise<boolean>, end: () => void }

/** A connection from `from` (a loopback address); `answered` sends GET /health and resolves with the status line. */
async function client (port: number, from: string): Promise<Client> {
  const socket = connect({ port, host: '127.0.0.1', localAddress: from })
  let data = ''
  socket.setEncoding('latin1')
  socket.on('data', (chunk: string) => { data += chunk })
  socket.on('error', () => {})
  const closed = once(socket, 'close').then(() => true)
  await once(socket, 'connect')
  t.teardown(() => { socket.destroy() })
  return {
    closed,
    end: () => socket.destroy(),
    answered: async () => {
      socket.write('GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n')
      for (let i = 0; i < 200 && !data.includes('\r\n\r\n') && !socket.destroyed; i++) await new Promise((resolve) => setTimeout(resolve, 10))
      return data.split('\r\n')[0] ?? ''
    }
  }
}

t.test('an address past its share of connections is closed at once; other addresses are served', async (t) => {
  const port = await listening({})
  const held = []
  for (let i = 0; i < SHARE; i++) held.push(await client(port, '127.0.0.2'))
  const extra = await client(port, '127.0.0.2')
  t.equal(await within(extra.closed, 2000), true, 'the connection past the share is closed')
  t.equal(await extra.answered(), '', 'and gets no answer')
  t.equal(await (await client(port, '127.0.0.3')).answered(), 'HTTP/1.1 200 OK', 'another address is served')
  for (const conn of held) t.equal(await conn.answered(), 'HTTP/1.1 200 OK', 'the held connections keep working')

  held[0]!.end()
  await held[0]!.closed
  let again: Client | undefined
  for (let i = 0; i < 100; i++) {
    again = await client(port, '127.0.0.2')
    if (await within(again.closed, 20) === undefined) break
  }
  t.equal(await again!.answered(), 'HTTP/1.1 200 OK', 'once one closes, the address may open another')
})

t.test('a trusted proxy is not held to one address\'s share', async (t) => {
  const port = await listening({ TRUST_PROXY: '127.0.0.4' })
  const clients = []
  for (let i = 0; i < SHARE * 2; i++) clients.push(await client(port, '127.0.0.4'))
  for (const conn of clients) t.equal(await conn.answered(), 'HTTP/1.1 200 OK')
})
