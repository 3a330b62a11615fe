// A TCP proxy the tests can cut, restore and freeze, so "the database went away" is real to
// the service (refused connections, dropped sockets, a silent partition) without stopping
// the shared server.
import { once } from 'node:events'
import { createConnection, createServer, type Server, type Socket } from 'node:net'

/** One proxied connection; while frozen, what either side sends (data, its end, its close) waits here. */
interface Link { client: Socket, upstream: Socket, held: Array<{ to: Socket, chunk?: Buffer, end?: true, destroy?: true }> }

export class TcpProxy {
  #server: Server | undefined
  #links = new Set<Link>()
  #frozen = false
  port = 0

  constructor (private readonly target: { host: string, port: number }) {}

  /** A proxy to the server `url` names (`defaultPort` when it names none). */
  static to (url: URL, defaultPort: number): TcpProxy {
    return new TcpProxy({ host: url.hostname, port: Number(url.port || defaultPort) })
  }

  /** `url` (its scheme, credentials and path kept) reached through this proxy; its port is known once it has started. */
  via (url: URL): string {
    const through = new URL(url)
    through.hostname = '127.0.0.1'
    through.port = String(this.port)
    return through.toString()
  }

  /** Starts listening (on the same port as before, after a stop). */
  async start (): Promise<void> {
    const server = createServer((client) => {
      const upstream = createConnection(this.target)
      const link: Link = { client, upstream, held: [] }
      this.#links.add(link)
      const pass = (message: Link['held'][number]) => {
        if (this.#frozen) return link.held.push(message)
        deliver(message)
      }
      for (const [from, to] of [[client, upstream], [upstream, client]] as const) {
        from.on('data', (chunk: Buffer) => pass({ to, chunk }))
        from.on('end', () => pass({ to, end: true }))
        from.on('error', () => {})
        from.on('close', () => {
          pass({ to, destroy: true })
          if (client.destroyed && upstream.destroyed) this.#links.delete(link)
        })
      }
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
    this.#frozen = false
    for (const { client, upstream } of this.#links) {
      client.destroy()
      upstream.destroy()
    }
    this.#links.clear()
    if (server) await new Promise((resolve) => server.close(resolve))
  }

  /**
   * A silent partition: no byte crosses in either direction and no close or reset is
   * passed on, while every socket stays open (new connections are accepted, and get no
   * further). Nothing tells either side that anything is wrong.
   */
  freeze (): void {
    this.#frozen = true
  }

  /** Ends the partition: what was held crosses now, in order, as a healed network would retransmit it. */
  thaw (): void {
    this.#frozen = false
    for (const link of this.#links) {
      for (const message of link.held.splice(0)) deliver(message)
    }
  }

  /** Connections the proxied client (the service) holds open through the proxy. */
  get openConnections (): number {
    let open = 0
    for (const { client } of this.#links) if (!client.destroyed) open++
    return open
  }

  /** A port that nothing listens on yet, kept for start(). */
  async reservePort (): Promise<number> {
    await this.start()
    await this.stop()
    return this.port
  }
}

function deliver ({ to, chunk, end, destroy }: Link['held'][number]): void {
  if (to.destroyed) return
  if (chunk) to.write(chunk)
  else if (end) to.end()
  else if (destroy) to.destroy()
}
