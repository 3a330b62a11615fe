// Shutdown: once close() begins, new requests get the 503 envelope (so /ready fails and
// load balancers move on), and answers to requests already in flight say
// `Connection: close`, so their keep-alive sockets end with them and the server can
// finish closing. (Fastify marks only requests that arrive after close() began.)
import fp from 'fastify-plugin'
import { ServiceUnavailableError } from '../../errors.js'

export default fp(async function gracefulClose (fastify) {
  let closing = false
  fastify.addHook('preClose', async () => { closing = true })
  fastify.addHook('onRequest', (_request, reply, done) => {
    if (!closing) return done()
    reply.header('connection', 'close')
    done(new ServiceUnavailableError())
  })
  fastify.addHook('onSend', (_request, reply, payload, done) => {
    if (closing) reply.header('connection', 'close')
    done(null, payload)
  })
}, { name: 'graceful-close' })
