// Shutdown in two steps. The drain (fastify.drain, started by server.ts on SIGTERM): /ready
// answers 503 so the load balancer takes the instance out of its rotation, while every other
// request is still served; each answer says `Connection: close`, so the balancer's kept-alive
// connections end with an answer instead of being cut under a request it is sending. Then
// close(): new requests get the 503 envelope, and answers to requests already in flight say
// `Connection: close`, so their sockets end with them and the server can finish closing.
// (Fastify marks only requests that arrive after close() began.)
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import fp from 'fastify-plugin'
import { ServiceUnavailableError } from '../../errors.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** True from the start of the drain (or of close()): /ready answers 503. */
    readonly draining: boolean
    /**
     * Reports not-ready and keeps serving for at least `ms`, and beyond it while work still
     * arrives (see drainFor); answers close their connections meanwhile.
     */
    drain: (ms: number) => Promise<void>
  }
  interface FastifyContextConfig {
    /** A balancer's or supervisor's check (/health, /ready): not work, so it does not hold up a drain. */
    probe?: boolean
  }
}

/**
 * After `ms`, requests still arriving mean the balancer has not yet taken the instance out:
 * its checks can be late (a check times out on an instance that stalled; under load on a
 * small machine one took 2.5 s instead of 1), and closing then cuts the requests it is still
 * sending. So the drain goes on until no request has come for a quarter of `ms` (500 ms at
 * most), and ends at the latest at three times `ms`, whatever still comes (a client that
 * reaches the instance directly, not through the balancer).
 *
 * Quiet counts only time the process saw. A timer that fires late means the process was
 * stalled (a busy machine, a long GC, a stopped container): connections that came meanwhile
 * are unread, some with their request still on its way, so the quiet period starts again at
 * the resume, and the latest end moves to leave room for it.
 */
async function drainFor (ms: number, lastRequestAt: () => number): Promise<void> {
  const started = performance.now()
  const quietMs = Math.min(500, ms / 4)
  let latest = started + 3 * ms
  let wake = started + ms
  let seeingSince = started
  await sleep(ms)
  for (;;) {
    // A timer runs before the event loop reads its sockets: requests that arrived just before
    // it fired are still unread. Two turns of the loop first: one accepts their connections,
    // the next reads them (the onRequest hook).
    await turn()
    await turn()
    const now = performance.now()
    if (now - wake > STALL_MS) {
      seeingSince = now
      latest = Math.max(latest, now + quietMs)
    }
    const quietFor = now - Math.max(lastRequestAt(), seeingSince)
    if (quietFor >= quietMs || now >= latest) return
    const wait = Math.min(quietMs - quietFor, latest - now)
    wake = now + wait
    await sleep(wait)
  }
}

/** How late a timer may fire before the drain takes it for a stall it could not see through. */
const STALL_MS = 50

/** Once around the event loop: resolves after its next poll for I/O. */
const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve))

export default fp(async function gracefulClose (fastify) {
  let draining = false
  let closing = false
  let lastRequestAt = 0
  fastify.decorate('draining', { getter: () => draining || closing })
  fastify.decorate('drain', async (ms: number) => {
    draining = true
    await drainFor(ms, () => lastRequestAt)
  })
  fastify.addHook('preClose', async () => { closing = true })
  fastify.addHook('onRequest', (request, reply, done) => {
    if (draining && request.routeOptions.config.probe !== true) lastRequestAt = performance.now()
    if (!closing) return done()
    reply.header('connection', 'close')
    done(new ServiceUnavailableError())
  })
  fastify.addHook('onSend', (_request, reply, payload, done) => {
    if (draining || closing) reply.header('connection', 'close')
    done(null, payload)
  })
}, { name: 'graceful-close' })
