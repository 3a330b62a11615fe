// The caller's sessions and security events (docs/sessions.md). Registered by
// routes/account/index.ts (under /account); the work is the sessions service's.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { methodsOf } from '../../db/sessions.js'
import type { SecurityEventRow, SessionRow } from '../../db/types.js'
import { clientOf } from '../../client-address.js'
import { errorResponses, NullSuccess, ref } from '../../schemas/common.js'
import { SecurityEventList, SecurityEventsQuery, SessionList, SessionParams, type SecurityEvent, type Session } from '../../schemas/sessions.js'

const toSession = (row: SessionRow, currentId: string): Session => ({
  id: row.id,
  method: row.method,
  methods: methodsOf(row.methods, row.method),
  provider: row.provider,
  createdAt: row.created_at,
  authenticatedAt: row.authenticated_at,
  steppedUpAt: row.stepped_up_at,
  lastSeenAt: row.last_seen_at,
  address: row.address,
  userAgent: row.user_agent,
  current: row.id === currentId
})

const toSecurityEvent = (row: SecurityEventRow): SecurityEvent => ({
  id: String(row.id),
  type: row.type as SecurityEvent['type'],
  createdAt: row.created_at,
  method: row.method,
  provider: row.provider,
  address: row.address,
  userAgent: row.user_agent,
  count: row.count
})

const sessions: FastifyPluginAsyncTypebox = async (fastify) => {
  fastify.get('/sessions', {
    schema: {
      tags: ['account'],
      operationId: 'listSessions',
      summary: 'The caller\'s live sessions, newest first',
      description: 'Every sign-in (password, sign-up, password reset, identity provider) is a session until it is ended, its token expires ' +
        '(7 days), or the password changes. `methods`: the factors its holder proved; `authenticatedAt`, `steppedUpAt`: when (the routes marked ' +
        '`x-step-up` need one of them within STEP_UP_MAX_AGE_S). `current` marks the session of the token that asked. At most 100.',
      response: { 200: ref(SessionList) }
    }
  }, async (request) => {
    const rows = await fastify.sessions.list(request.user.id)
    return { success: true as const, data: rows.map((row) => toSession(row, request.principal.session!.jti)) }
  })

  fastify.delete('/sessions/:id', {
    schema: {
      tags: ['account'],
      operationId: 'endSession',
      summary: 'End one of the caller\'s sessions',
      description: 'Its token is refused (401) from then on, by every instance. Ending the current session also clears the `auth_token` cookie. ' +
        'An unknown, already ended, or another user\'s session is 404 `SESSION_NOT_FOUND`.',
      params: SessionParams,
      response: { 200: NullSuccess, ...errorResponses(404) }
    }
  }, async (request, reply) => {
    await fastify.sessions.end(request.user.id, request.params.id, clientOf(request))
    if (request.params.id === request.principal.session!.jti) fastify.clearAuthCookie(reply)
    return { success: true as const, data: null }
  })

  fastify.get('/security-events', {
    schema: {
      tags: ['account'],
      operationId: 'listSecurityEvents',
      summary: 'What happened to the account in the last 90 days, newest first',
      description: 'Sign-ins (method, address, user agent), failed password sign-ins (one event a day with its count), sign-outs, ' +
        'sessions ended, password and email changes, identity-provider sign-ins linked and unlinked. Paged by `limit` and `before` ' +
        '(the previous page\'s `nextBefore`).',
      querystring: SecurityEventsQuery,
      response: { 200: ref(SecurityEventList) }
    }
  }, async (request) => {
    const limit = request.query.limit ?? 50
    const { events, more } = await fastify.sessions.events(request.user.id, { limit, before: request.query.before })
    return { success: true as const, data: events.map(toSecurityEvent), ...(more && { nextBefore: String(events.at(-1)!.id) }) }
  })
}

export default sessions
