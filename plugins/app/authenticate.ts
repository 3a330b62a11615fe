// Protection is structural: every route requires a valid user unless it declares
// `config: { public: true }`. A forgotten option fails closed.
import { randomUUID } from 'node:crypto'
import fp from 'fastify-plugin'
import type { FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify'
import { purgeExpiredRevocations } from '../../db/revoked-tokens.js'
import { touchSession } from '../../db/sessions.js'
import { earliestTokenIat, findUserForToken } from '../../db/users.js'
import type { SessionMethod, UserRow } from '../../db/types.js'
import type { Client } from '../../client-address.js'
import type { PresentedToken } from '../../accounts/sessions.js'
import { TOKEN_LIFETIME_SECONDS, type VerifiedClaims } from '../external/jwt.js'
import { allowedOrigins } from '../../config.js'
import { ForbiddenError, UnauthorizedError } from '../../errors.js'

export const AUTH_COOKIE = 'auth_token'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Reachable without a token. */
    public?: boolean
  }
  interface FastifyRequest {
    tokenClaims: VerifiedClaims | null
    /** The presented token, once authenticated: its `jti`, expiry, and whether it has a session. */
    presentedToken: PresentedToken | null
  }
  interface FastifyInstance {
    authenticate: onRequestHookHandler
    /**
     * Starts a session for the user, signs its token and sets it as the auth cookie; returns
     * the token for the body.
     */
    signIn: (reply: FastifyReply, user: UserRow, how: { method: SessionMethod, client: Client, provider?: string }) => Promise<string>
    clearAuthCookie: (reply: FastifyReply) => void
  }
}

function presentedToken (request: FastifyRequest): { token: string, from: 'header' | 'cookie' } | undefined {
  const header = request.headers.authorization
  if (header !== undefined) {
    const match = /^Bearer[ ]+(\S+)\s*$/i.exec(header)
    if (match) return { token: match[1]!, from: 'header' }
  }
  // The header wins (spec §5.2); the cookie is the fallback for browser sessions.
  const cookie = request.cookies[AUTH_COOKIE]
  return cookie ? { token: cookie, from: 'cookie' } : undefined
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS'])
const PURGE_INTERVAL_MS = 10 * 60_000
/** A session's "last seen" is written at most once a minute. */
const LAST_SEEN_RESOLUTION_MS = 60_000
/**
 * How far in the future a token's `iat` may be: clocks a little apart (and the next second a
 * token signed within a password change carries). Beyond it a token is refused, or one minted
 * before "sign out everywhere else" by a fast clock would pass for one minted after it.
 */
const IAT_LEEWAY_SECONDS = 5
/** Our jti is a UUID; sessions keep ids up to this long. */
const MAX_JTI_LENGTH = 255

export default fp(async function authenticate (fastify) {
  const secureCookie = new URL(fastify.config.http.apiUrl).protocol === 'https:'
  const cookieOptions = { httpOnly: true, sameSite: 'lax', path: '/', secure: secureCookie } as const

  // @fastify/jwt already decorates request.tokenClaims (its decoratorName).
  fastify.decorateRequest('user', null as unknown as UserRow)
  fastify.decorateRequest('presentedToken', null)

  const origins = new Set(allowedOrigins(fastify.config))
  // A browser sends the cookie along with requests other sites trigger; a header token it never sends
  // by itself. So cookie-authenticated unsafe requests must come from our own origins.
  const isCrossSite = (request: FastifyRequest): boolean => {
    const origin = request.headers.origin
    if (origin !== undefined) return !origins.has(origin)
    return request.headers['sec-fetch-site'] === 'cross-site'
  }

  fastify.decorate('authenticate', async function (request: FastifyRequest) {
    const presented = presentedToken(request)
    if (presented === undefined) throw new UnauthorizedError()
    if (presented.from === 'cookie' && !SAFE_METHODS.has(request.method) && isCrossSite(request)) throw new ForbiddenError()
    let claims: VerifiedClaims
    try {
      claims = fastify.jwt.verify<VerifiedClaims>(presented.token)
    } catch {
      throw new UnauthorizedError()
    }
    if (claims.iat > Date.now() / 1000 + IAT_LEEWAY_SECONDS || claims.jti.length > MAX_JTI_LENGTH) throw new UnauthorizedError()
    const holder = await findUserForToken(fastify.db, claims.sub, claims.jti)
    // A deleted user, a revoked token, or a token from before a password change.
    if (holder === undefined || claims.iat < earliestTokenIat(holder.user)) throw new UnauthorizedError()
    const { session } = holder
    if (session === null) {
      // Minted elsewhere with the documented claims: void once "sign out everywhere else" ran after it.
      if (claims.iat < holder.earliestSessionlessIat) throw new UnauthorizedError()
    } else {
      if (session.endedAt !== null) throw new UnauthorizedError()
      if (Date.now() - Date.parse(session.lastSeenAt) >= LAST_SEEN_RESOLUTION_MS) await touchSession(fastify.db, claims.jti)
    }
    request.user = holder.user
    request.tokenClaims = claims
    request.presentedToken = { jti: claims.jti, exp: claims.exp, hasSession: session !== null }
  })

  fastify.decorate('signIn', async function (reply: FastifyReply, user: UserRow, how: { method: SessionMethod, client: Client, provider?: string }): Promise<string> {
    // Exactly the claims of spec §5.1 plus `jti`, so other holders of the secret can read and
    // sign the same tokens. Within the second of a password change, `iat` is the next second.
    const iat = Math.max(Math.floor(Date.now() / 1000), earliestTokenIat(user))
    const jti = randomUUID()
    // The session outlives its token by a minute: its row, ended or not, is never purged while the token works.
    await fastify.sessions.start({ id: jti, userId: user.id, ...how, expiresAt: new Date((iat + TOKEN_LIFETIME_SECONDS + 60) * 1000) })
    const token = fastify.jwt.sign({ sub: user.id, email: user.email, jti, iat })
    reply.setCookie(AUTH_COOKIE, token, { ...cookieOptions, maxAge: TOKEN_LIFETIME_SECONDS })
    return token
  })

  fastify.decorate('clearAuthCookie', function (reply: FastifyReply) {
    reply.clearCookie(AUTH_COOKIE, cookieOptions)
  })

  fastify.addHook('onRoute', (route) => {
    if (route.config?.public === true) {
      if (route.schema !== undefined) route.schema.security = []
      return
    }
    // After the route's other onRequest hooks, the global rate limit's among them (its onRoute
    // hook ran first): a request over the limit is refused before its token costs a query.
    const existing = route.onRequest === undefined ? [] : [route.onRequest].flat()
    route.onRequest = [...existing, fastify.authenticate]
    // The document says what the hook enforces, so it cannot drift from it.
    if (route.schema !== undefined) route.schema.security = [{ bearerAuth: [] }, { cookieAuth: [] }]
  })

  // A revocation outlives its token by nothing: once the token has expired it is refused anyway.
  fastify.jobs.every('auth.purge-revocations', PURGE_INTERVAL_MS, async () => {
    try {
      await purgeExpiredRevocations(fastify.db)
    } catch (err) {
      fastify.log.warn({ err }, 'purging expired revocations failed: trying again later')
    }
  })
}, { name: 'authenticate', dependencies: ['db', 'scheduler', 'sessions', '@fastify/jwt', '@fastify/cookie'] })
