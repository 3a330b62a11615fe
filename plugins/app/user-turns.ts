// Turns per user: a route whose answers can be large (GET /tasks: pages up to PAGE_BYTES)
// declares `config: { answersPerUser: n }`, and each instance builds at most n of its answers
// for one user at once. One user's closed loop of heavy requests then holds the event loop
// for one answer at a time, not one per connection: other users' requests and the probes
// wait behind at most that one turn (issue 22 row 16). A user's further requests wait their
// turn in a line of at most WAITING_PER_USER (waiting costs nothing but the open request);
// past it they are refused at once with 429 and Retry-After. A request leaves the line, or
// gives its turn back, when its response is done or its connection is gone, whichever way it
// ends. Per instance: across a fleet each instance bounds what it serves.
import fp from 'fastify-plugin'
import type { FastifyReply, FastifyRequest, preHandlerHookHandler, RouteOptions } from 'fastify'
import { rateLimited } from '../../errors.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** At most this many answers of the route built at once for one user (plugins/app/user-turns.ts). */
    answersPerUser?: number
  }
}

/**
 * Requests of one user waiting for a turn on one route, beyond which they are refused: as many
 * connections as one address may hold (MAX_CONNECTIONS_PER_ADDRESS's default), so a client on
 * one address that waits for its answers is never refused for it.
 */
export const WAITING_PER_USER = 64

interface Line { running: number, waiting: Array<() => void> }

export default fp(async function userTurns (fastify) {
  fastify.addHook('onRoute', (route: RouteOptions) => {
    const limit = route.config?.answersPerUser
    if (limit === undefined) return
    if (route.config?.public === true) throw new Error(`${String(route.method)} ${route.url}: answersPerUser needs an authenticated route`)
    const lines = new Map<string, Line>()

    const next = (userId: string, line: Line) => {
      const go = line.waiting.shift()
      if (go !== undefined) go()
      else if (line.running === 0) lines.delete(userId)
    }

    const takeTurn: preHandlerHookHandler = function (request: FastifyRequest, reply: FastifyReply, done) {
      // A client already gone gets no turn: nothing would give it back.
      if (reply.raw.closed) return done()
      const userId = String(request.user.id)
      let line = lines.get(userId)
      if (line === undefined) lines.set(userId, line = { running: 0, waiting: [] })
      const current = line
      let state: 'waiting' | 'running' | 'over' = 'waiting'
      const start = () => {
        state = 'running'
        current.running++
        done()
      }
      // 'close' comes once the response is sent, or once the connection is gone before it.
      reply.raw.once('close', () => {
        if (state === 'running') {
          current.running--
          next(userId, current)
        } else if (state === 'waiting') {
          const at = current.waiting.indexOf(start)
          if (at !== -1) current.waiting.splice(at, 1)
          if (current.running === 0 && current.waiting.length === 0) lines.delete(userId)
        }
        state = 'over'
      })
      if (current.running < limit) return start()
      if (current.waiting.length >= WAITING_PER_USER) {
        state = 'over'
        return done(rateLimited(1))
      }
      current.waiting.push(start)
    }

    const existing = route.preHandler === undefined ? [] : [route.preHandler].flat()
    route.preHandler = [...existing, takeTurn]
  })
}, { name: 'user-turns', dependencies: ['authenticate'] })
