// A TCP proxy the tests can cut and restore, so "the database went away" is real to the
// service (refused connections, dropped sockets) without stopping the shared server.
import { once } from 'node:events'
import { createConnection, createServer, type Server, type Socket } from 'node:net'

export class TcpProxy {
  #server: Server | undefined
  #sockets = new Set<Socket>()
  port = 0

  constructor (private readonly target: { host: string, port: number }) {}

  /** Starts listening (on the same port as before, after a stop). */
  async start (): Promise<void> {
    const server = createServer((client) => {
      const upstream = createConnection(this.target)
      for (const socket of [client, upstream]) {
        this.#sockets.add(socket)
        socket.on('close', () => this.#sockets.delete(socket))
        socket.on('error', () => { client.destroy(); upstream.destroy() })
      }
      client.pipe(upstream).pipe(client)
    })
    server.listen(this.port, '127.0.0.1')
    await once(server, 'listening')
    this.port = (server.address() as { port: number }).port
    this.#server = server
  }

  /** Refuses new connections and drops the open ones. */
  async stop (): Promise<void> {
    const server = this.#server
    this.#server = undefined
    for (const socket of this.#sockets) socket.destroy()
    this.#sockets.clear()
    if (server) await new Promise((resolve) => server.close(resolve))
  }

  /** A port that nothing listens on yet, kept for start(). */
  async reservePort (): Promise<number> {
    await this.start()
    await this.stop()
    return this.port
  }
}
