// Turns per user: a route whose answers can be large (GET /tasks: pages up to PAGE_BYTES)
// declares `config: { answersPerUser: n }`, and each instance builds at most n of its answers
// for one user at once. One user's closed loop of heavy requests then holds the event loop
// for one answer at a time, not one per connection: other users' requests and the probes
// wait behind at most that one turn (issue 22 row 16). A user's further requests wait their
// turn in a line of at most WAITING_PER_USER (waiting costs nothing but the open request);
// past it they are refused at once with 429 and Retry-After. A request leaves the line, or
// gives its turn back, when its response is done or its connection is gone, whichever way it
// ends. Per instance: across a fleet each instance bounds what it serves.
//
// A route may also declare `linedAfterBytes`: then only the users one of whose answers passed
// that size in the last LINED_FOR_MS take turns (the answer's size is known in onSend, before
// it is written). The others' requests, the light pages nearly every user has, go straight
// through. A line for every user cost GET /tasks on the embedded database when users had more
// connections than turns (issue 30: 20 users over 50 connections, seeded through the API):
// 402–473 req/s with the line against 754–789 without on a busy machine, 718–1022 against
// 830–1102 on a quiet one; the requests the database thread could have overlapped waited in
// lines instead. A heavy user's first answers, sent before the first of them was measured,
// run unlined: at most one address's connections, once.
import fp from 'fastify-plugin'
import type { FastifyReply, FastifyRequest, preHandlerHookHandler, RouteOptions } from 'fastify'
import { rateLimited } from '../../errors.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** At most this many answers of the route built at once for one user (plugins/app/user-turns.ts). */
    answersPerUser?: number
    /** With answersPerUser: only users with an answer past this many bytes in the last LINED_FOR_MS take turns. */
    linedAfterBytes?: number
  }
}

/**
 * Requests of one user waiting for a turn on one route, beyond which they are refused: as many
 * connections as one address may hold (MAX_CONNECTIONS_PER_ADDRESS's default), so a client on
 * one address that waits for its answers is never refused for it.
 */
export const WAITING_PER_USER = 64

/** How long a user stays lined after an answer past the route's `linedAfterBytes`. */
export const LINED_FOR_MS = 10 * 60_000
/** The most users one route remembers as heavy (the oldest is forgotten first): bounded memory. */
const MOST_HEAVY_USERS = 10_000

interface Line { running: number, waiting: Array<() => void> }

export default fp(async function userTurns (fastify) {
  fastify.addHook('onRoute', (route: RouteOptions) => {
    const limit = route.config?.answersPerUser
    if (limit === undefined) return
    if (route.config?.public === true) throw new Error(`${String(route.method)} ${route.url}: answersPerUser needs an authenticated route`)
    const lines = new Map<string, Line>()
    const linedAfter = route.config?.linedAfterBytes
    // User id → when the last answer past linedAfterBytes was sent (insertion order: oldest first).
    const heavy = new Map<string, number>()
    const isLined = (userId: string): boolean => {
      if (linedAfter === undefined) return true
      const at = heavy.get(userId)
      if (at === undefined) return false
      if (Date.now() - at < LINED_FOR_MS) return true
      heavy.delete(userId)
      return false
    }
    if (linedAfter !== undefined) {
      const measure = (request: FastifyRequest, _reply: FastifyReply, payload: unknown, done: (err: null, payload: unknown) => void) => {
        const size = typeof payload === 'string' || Buffer.isBuffer(payload) ? payload.length : 0
        if (size > linedAfter && request.user !== undefined && request.user !== null) {
          const userId = request.user.id
          heavy.delete(userId)
          heavy.set(userId, Date.now())
          if (heavy.size > MOST_HEAVY_USERS) heavy.delete(heavy.keys().next().value!)
        }
        done(null, payload)
      }
      route.onSend = [...(route.onSend === undefined ? [] : [route.onSend].flat()), measure]
    }

    const next = (userId: string, line: Line) => {
      const go = line.waiting.shift()
      if (go !== undefined) go()
      else if (line.running === 0) lines.delete(userId)
    }

    const takeTurn: preHandlerHookHandler = function (request: FastifyRequest, reply: FastifyReply, done) {
      // A client already gone gets no turn: nothing would give it back.
      if (reply.raw.closed) return done()
      // Before a `tokenInStatement` route's statement has checked the token, the id its verified signature names.
      const userId = request.userId
      if (!isLined(userId)) return done()
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
