// Shutdown in two steps. The drain (fastify.drain, started by server.ts on SIGTERM): /ready
// answers 503 so the load balancer takes the instance out of its rotation, while every other
// request is still served; each answer says `Connection: close`, so the balancer's kept-alive
// connections end with an answer instead of being cut under a request it is sending. Then
// close(): new requests get the 503 envelope, and answers to requests already in flight say
// `Connection: close`, so their sockets end with them and the server can finish closing.
// (Fastify marks only requests that arrive after close() began.)
import { setTimeout as sleep } from 'node:timers/promises'
import fp from 'fastify-plugin'
import { ServiceUnavailableError } from '../../errors.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** True from the start of the drain (or of close()): /ready answers 503. */
    readonly draining: boolean
    /** Reports not-ready and keeps serving for `ms`; answers close their connections meanwhile. */
    drain: (ms: number) => Promise<void>
  }
}

export default fp(async function gracefulClose (fastify) {
  let draining = false
  let closing = false
  fastify.decorate('draining', { getter: () => draining || closing })
  fastify.decorate('drain', async (ms: number) => {
    draining = true
    await sleep(ms)
  })
  fastify.addHook('preClose', async () => { closing = true })
  fastify.addHook('onRequest', (_request, reply, done) => {
    if (!closing) return done()
    reply.header('connection', 'close')
    done(new ServiceUnavailableError())
  })
  fastify.addHook('onSend', (_request, reply, payload, done) => {
    if (draining || closing) reply.header('connection', 'close')
    done(null, payload)
  })
}, { name: 'graceful-close' })
