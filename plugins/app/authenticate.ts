// Protection is structural: every route requires a credential unless it declares
// `config: { public: true }`. A forgotten option fails closed. The credential (the bearer
// header, else the cookie) goes to the first of the readers that takes it (accounts/credentials.ts:
// an API key by its prefix, else the session token), which yields the principal; a route's flags are judged on it:
// `scopes` (what a credential must hold; without them, only a session may ask) and `stepUp`
// (a session proved within STEP_UP_MAX_AGE_S: accounts/step-up.ts, a hook of its own that only
// the routes that declare it get).
// Signing a token is the sign-in door's (accounts/sign-in.ts); this plugin sets its cookie and
// writes its part of the answer (answerSignIn: the token, or the second factor's challenge,
// which sets no cookie), and clears the cookie at sign-out.
import fp from 'fastify-plugin'
import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler, onSendHookHandler } from 'fastify'
import { checkTokenHolder, holdsScopes, readCredential, sessionTokenReader, type CredentialReader, type Principal, type VerifiedTokenClaims } from '../../accounts/credentials.js'
import type { SignedIn, SignInOutcome } from '../../accounts/sign-in.js'
import { purgeExpiredRevocations } from '../../db/revoked-tokens.js'
import type { UserRow } from '../../db/types.js'
import { holderCache, type HolderCache } from '../../accounts/holder-cache.js'
import { keyLivesUntil, type KeyAsk, type KeyHolderRow } from '../../db/api-keys.js'
import { sendTokenHolderNotices, TOKEN_HOLDER_CHANNEL, toTokenHolder, toUser, type TokenAsk, type WithHolder } from '../../db/users.js'
import type { User } from '../../schemas/users.js'
import type { VerifiedClaims } from '../external/jwt.js'
import { allowedOrigins } from '../../config.js'
import { clientOf } from '../../client-address.js'
import { ApiKeyNotAllowedError, ForbiddenError, InsufficientScopeError, UnauthorizedError } from '../../errors.js'

export const AUTH_COOKIE = 'auth_token'

/** The sign-in's part of an answer (AuthResponse): the token and the user (after a recovery code, how many are left). */
export interface SignedInAnswer { token: string, user: User, recoveryCodesLeft?: number }
/** Or, for an account with a second factor, its challenge (MfaChallenge): no token yet. */
export interface SecondFactorAnswer { mfaRequired: true, mfaToken: string, methods: Array<'totp' | 'recovery' | 'passkey'> }
export type SignInAnswer = SignedInAnswer | SecondFactorAnswer

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Reachable without a credential. */
    public?: boolean
    /**
     * Only for a session whose holder signed in or stepped up within STEP_UP_MAX_AGE_S (403
     * STEP_UP_REQUIRED): every route that adds a way in. Documented as `x-step-up: <seconds>`.
     */
    stepUp?: boolean
    /**
     * Scopes the credential must hold (403 INSUFFICIENT_SCOPE); a session holds every scope. Only
     * routes that name scopes are open to a credential that is no session (an API key); the
     * others answer it 403 API_KEY_NOT_ALLOWED.
     */
    scopes?: string[]
    /**
     * The route's statement reads the session token's holder itself (db/users.ts, tokenHolder),
     * saving the token check's own round trip: its handler runs its work through
     * request.authenticatedBy. Only for a session token (an API key: `keyInStatement`); a
     * request with an Idempotency-Key (whose record is looked up for the user before the route
     * runs) is checked by the hook as on every route. Never with `stepUp`.
     */
    tokenInStatement?: boolean
    /**
     * The same for an API key (db/api-keys.ts, keyHolder): the route's statement reads whether
     * the key lives, beside its data, and its handler passes request.authenticatedBy the
     * statement for a key. Only on a route that names scopes, for a key this process has read
     * live before (its owner and scopes are kept: accounts/api-keys.ts, ask); any other key is
     * checked by the hook, and so is any request with an Idempotency-Key. Never with `stepUp`.
     */
    keyInStatement?: boolean
  }
  interface FastifyRequest {
    /** Who asks, once authenticated: the user, the session behind the credential, its scopes. */
    principal: Principal
    /**
     * The id of the user who asks: the authenticated user's, or on a `tokenInStatement` route
     * before its statement has checked the token, the id its verified signature names (on a
     * `keyInStatement` route, the owner kept for the key), for lining up its requests
     * (plugins/app/user-turns.ts; never for reading its data).
     */
    readonly userId: string
    /**
     * Runs the route's work. On a `tokenInStatement` route whose token the hook left to it:
     * `withToken`, a statement that also reads the token's holder, whose row is then checked as
     * the hook would have (accounts/credentials.ts, checkTokenHolder: 401 when it does not hold),
     * setting the principal. On a `keyInStatement` route whose API key the hook left to it:
     * `withKey`, likewise (401 without the key's row). Otherwise `alone`, for the authenticated user.
     */
    authenticatedBy: <T>(
      withToken: (token: TokenAsk) => Promise<WithHolder<T> | undefined>,
      alone: (userId: string) => Promise<T>,
      /** On a `keyInStatement` route: its statement for an API key, which reads the key's holder too. */
      withKey?: (key: KeyAsk) => Promise<WithHolder<T, KeyHolderRow> | undefined>
    ) => Promise<T>
  }
  interface FastifyInstance {
    authenticate: onRequestHookHandler
    /**
     * Writes a completed sign-in (fastify.signIn.complete): sets its token as the auth cookie
     * and gives the answer's fields.
     */
    answerSignIn: {
      (reply: FastifyReply, outcome: SignedIn): SignedInAnswer
      (reply: FastifyReply, outcome: SignInOutcome): SignInAnswer
    }
    clearAuthCookie: (reply: FastifyReply) => void
  }
}

function presentedCredential (request: FastifyRequest): { credential: string, from: 'header' | 'cookie' } | undefined {
  const header = request.headers.authorization
  if (header !== undefined) {
    const match = /^Bearer[ ]+(\S+)\s*$/i.exec(header)
    if (match) return { credential: match[1]!, from: 'header' }
  }
  // The header wins (spec §5.2); the cookie is the fallback for browser sessions.
  const cookie = request.cookies[AUTH_COOKIE]
  return cookie ? { credential: cookie, from: 'cookie' } : undefined
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS'])
/** A `tokenInStatement` request's verified claims, until its statement has checked the token. */
const kTokenClaims = Symbol('token claims for the statement')
/** A `keyInStatement` request's API key, until its statement has checked it. */
const kKeyAsk = Symbol('API key for the statement')
type WithClaims = FastifyRequest & { [kTokenClaims]: VerifiedTokenClaims | null, [kKeyAsk]: KeyAsk | null }
const PURGE_INTERVAL_MS = 10 * 60_000

export default fp(async function authenticate (fastify) {
  const secureCookie = new URL(fastify.config.http.apiUrl).protocol === 'https:'
  const cookieOptions = { httpOnly: true, sameSite: 'lax', path: '/', secure: secureCookie } as const
  const stepUpMaxAge = fastify.config.auth.stepUpMaxAgeSeconds

  // In order: the first that takes a credential reads it. The API key's (by its `tsk_` prefix)
  // goes before the session token's, which takes anything. A cookie only ever holds a session
  // token (we set it); a key is read only from the Authorization header.
  const kept = keptHolders(fastify)
  const holders = kept?.tokens
  const keyHolders = kept?.keys
  const sessionReader = sessionTokenReader({ db: fastify.db, verify: (token) => fastify.jwt.verify<VerifiedClaims>(token), holders })
  const keyReader = fastify.apiKeyReader
  const headerReaders: CredentialReader[] = [keyReader, sessionReader]
  const cookieReaders: CredentialReader[] = [sessionReader]

  fastify.decorateRequest('user', null as unknown as UserRow)
  fastify.decorateRequest('principal', null as unknown as Principal)
  fastify.decorateRequest(kTokenClaims, null)
  fastify.decorateRequest(kKeyAsk, null)
  fastify.decorateRequest('userId', {
    getter (this: FastifyRequest) {
      if (this.user !== null) return this.user.id
      const request = this as WithClaims
      return request[kTokenClaims]?.sub ?? request[kKeyAsk]!.userId
    }
  })
  fastify.decorateRequest('authenticatedBy', async function authenticatedBy<T> (
    this: FastifyRequest,
    withToken: (token: TokenAsk) => Promise<WithHolder<T> | undefined>,
    alone: (userId: string) => Promise<T>,
    withKey?: (key: KeyAsk) => Promise<WithHolder<T, KeyHolderRow> | undefined>
  ): Promise<T> {
    const request = this as WithClaims
    const key = request[kKeyAsk]
    if (key !== null) {
      if (withKey === undefined) throw new Error(`${request.method} ${request.routeOptions.url ?? ''} is keyInStatement: its handler gives request.authenticatedBy no statement for a key`)
      const ticket = keyHolders?.ticket()
      const found = await withKey(key)
      keyHolders?.keep(ticket!, key.userId, key.keyHash, found?.holder)
      const principal = await keyReader.principalOf(key, found?.holder, () => clientOf(request))
      request[kKeyAsk] = null
      request.principal = principal
      request.user = principal.user
      return found!.result
    }
    const claims = request[kTokenClaims]
    if (claims === null) return alone(request.user.id)
    const ticket = holders?.ticket()
    const found = await withToken({ userId: claims.sub, jti: claims.jti, iat: claims.iat })
    const holder = toTokenHolder(found?.holder)
    holders?.keep(ticket!, claims.sub, claims.jti, holder)
    const principal = await checkTokenHolder(fastify.db, claims, holder)
    request[kTokenClaims] = null
    request.principal = principal
    request.user = principal.user
    return found!.result
  })

  const origins = new Set(allowedOrigins(fastify.config))
  // A browser sends the cookie along with requests other sites trigger; a header token it never sends
  // by itself. So cookie-authenticated unsafe requests must come from our own origins.
  const isCrossSite = (request: FastifyRequest): boolean => {
    const origin = request.headers.origin
    if (origin !== undefined) return !origins.has(origin)
    return request.headers['sec-fetch-site'] === 'cross-site'
  }

  // One hook per route, knowing the scopes it names. A credential that is no session (an API
  // key) reaches only the routes that name scopes (403 API_KEY_NOT_ALLOWED elsewhere: the
  // account, sign-in and billing routes), and only with those scopes (403 INSUFFICIENT_SCOPE).
  const authenticateFor = (scopes: readonly string[] | undefined, inStatement: { token?: boolean, key?: boolean } = {}): onRequestHookHandler => async function authenticate (request: FastifyRequest) {
    const presented = presentedCredential(request)
    if (presented === undefined) throw new UnauthorizedError()
    const fromCookie = presented.from === 'cookie'
    if (fromCookie && !SAFE_METHODS.has(request.method) && isCrossSite(request)) throw new ForbiddenError()
    const readers = fromCookie ? cookieReaders : headerReaders
    // A session token (the session reader's, the first to take it; a session holds every
    // scope), left to the route's statement: its signature and times are checked here, its
    // holder by request.authenticatedBy, unless it is kept (then the route's statement runs alone).
    const reader = (inStatement.token === true || inStatement.key === true) && request.headers['idempotency-key'] === undefined
      ? readers.find((reader) => reader.takes(presented.credential))
      : undefined
    // An API key this process has read live before, left to the route's statement likewise:
    // its form, scopes and limit checked here (accounts/api-keys.ts, ask); its holder too,
    // unless it is kept (the embedded database: then the route's statement runs alone).
    if (inStatement.key === true && reader === keyReader) {
      const key = await keyReader.ask(presented.credential, scopes!)
      if (key !== undefined) {
        const keptKey = keyHolders?.get(key.userId, key.keyHash)
        if (keptKey === undefined) {
          (request as WithClaims)[kKeyAsk] = key
          return
        }
        const principal = await keyReader.principalOf(key, keptKey, () => clientOf(request))
        request.principal = principal
        request.user = principal.user
        return
      }
    }
    if (inStatement.token === true && reader === sessionReader) {
      const claims = sessionReader.claims(presented.credential)
      const kept = holders?.get(claims.sub, claims.jti)
      if (kept === undefined) {
        (request as WithClaims)[kTokenClaims] = claims
        return
      }
      const principal = await checkTokenHolder(fastify.db, claims, kept)
      request.principal = principal
      request.user = principal.user
      return
    }
    const principal = await readCredential(readers, presented.credential, () => clientOf(request))
    if (scopes === undefined) {
      if (principal.session === null) throw new ApiKeyNotAllowedError()
    } else if (!holdsScopes(principal, scopes)) {
      throw new InsufficientScopeError()
    }
    request.principal = principal
    request.user = principal.user
  }
  fastify.decorate('authenticate', authenticateFor(undefined))

  const answerSignIn = (reply: FastifyReply, outcome: SignInOutcome): SignInAnswer => {
    // No token and no cookie until the second factor: the mfaToken is no credential.
    if (outcome.outcome === 'second-factor-required') return { mfaRequired: true, mfaToken: outcome.mfaToken, methods: outcome.methods }
    reply.setCookie(AUTH_COOKIE, outcome.token, { ...cookieOptions, maxAge: outcome.maxAgeSeconds })
    const answer: SignedInAnswer = { token: outcome.token, user: toUser(outcome.user) }
    if (outcome.recoveryCodesLeft !== undefined) answer.recoveryCodesLeft = outcome.recoveryCodesLeft
    return answer
  }
  fastify.decorate('answerSignIn', answerSignIn as FastifyInstance['answerSignIn'])

  fastify.decorate('clearAuthCookie', function (reply: FastifyReply) {
    reply.clearCookie(AUTH_COOKIE, cookieOptions)
  })

  // After authentication, only on the routes that ask for it: the others pay nothing.
  const requireStepUp: onRequestHookHandler = async function requireStepUp (request) {
    await fastify.stepUp.assertFresh(request.principal)
  }

  // Fails closed: a `tokenInStatement` or `keyInStatement` route that answered without running
  // its work through request.authenticatedBy answers 500, never its data unchecked.
  const checkedByStatement: onSendHookHandler = function checkedByStatement (request, reply, payload, done) {
    if (((request as WithClaims)[kTokenClaims] !== null || (request as WithClaims)[kKeyAsk] !== null) && reply.statusCode < 400) {
      done(new Error(`${request.method} ${request.routeOptions.url ?? ''} answered without checking its credential (request.authenticatedBy)`))
      return
    }
    done(null, payload)
  }

  fastify.addHook('onRoute', (route) => {
    const { public: isPublic, stepUp, scopes, tokenInStatement, keyInStatement } = route.config ?? {}
    if (isPublic === true) {
      if (stepUp === true || scopes !== undefined || tokenInStatement !== undefined || keyInStatement !== undefined) {
        throw new Error(`${String(route.method)} ${route.url} is public: it cannot ask for a step-up, scopes or a credential check in its statement`)
      }
      if (route.schema !== undefined) route.schema.security = []
      return
    }
    const inStatement = { token: tokenInStatement === true, key: keyInStatement === true }
    if ((inStatement.token || inStatement.key) && stepUp === true) throw new Error(`${String(route.method)} ${route.url}: a step-up is checked before the route runs, not in its statement`)
    if (inStatement.key && scopes === undefined) throw new Error(`${String(route.method)} ${route.url}: keyInStatement on a route no API key may use (it names no scopes)`)
    // After the route's other onRequest hooks, the global rate limit's among them (its onRoute
    // hook ran first): a request over the limit is refused before its token costs a query.
    const existing = route.onRequest === undefined ? [] : [route.onRequest].flat()
    const check = inStatement.token || inStatement.key ? authenticateFor(scopes, inStatement) : scopes === undefined ? fastify.authenticate : authenticateFor(scopes)
    route.onRequest = [...existing, check, ...(stepUp === true ? [requireStepUp] : [])]
    if (inStatement.token || inStatement.key) route.onSend = [...(route.onSend === undefined ? [] : [route.onSend].flat()), checkedByStatement]
    // The document says what the hooks enforce, so it cannot drift from them.
    if (route.schema !== undefined) {
      // An API key's scheme lists the scopes a key needs here (OpenAPI 3.1 allows them on any scheme).
      route.schema.security = [{ bearerAuth: [] }, { cookieAuth: [] }, ...(scopes === undefined ? [] : [{ apiKeyAuth: scopes }])]
      if (stepUp === true) (route.schema as Record<string, unknown>)['x-step-up'] = stepUpMaxAge
    }
  })

  // A revocation outlives its token by nothing: once the token has expired it is refused anyway.
  fastify.jobs.purgeEvery('auth.purge-revocations', PURGE_INTERVAL_MS, async () => { await purgeExpiredRevocations(fastify.db) }, { failed: 'purging expired revocations failed' })
}, { name: 'authenticate', dependencies: ['db', 'scheduler', 'api-keys', '@fastify/jwt', '@fastify/cookie'] })

/**
 * On the embedded database, the token holders and the API key holders this process keeps
 * (accounts/holder-cache.ts), told of every change by the database's notices: listening and the
 * notices turned on before the server is ready, so before any request. None on a PostgreSQL server.
 */
function keptHolders (fastify: FastifyInstance): { tokens: HolderCache, keys: HolderCache<KeyHolderRow> } | undefined {
  const listen = fastify.listenToDb
  if (listen === undefined) return undefined
  const tokens = holderCache()
  const keys = holderCache(keyLivesUntil)
  const changed = (userId: string) => {
    tokens.changed(userId)
    keys.changed(userId)
  }
  // Under way while the other plugins load; a failure stops start-up, as the database's own would.
  const listening = Promise.all([listen(TOKEN_HOLDER_CHANNEL, changed), sendTokenHolderNotices(fastify.db)])
    .then(() => undefined, (err: unknown) => err as Error)
  fastify.addHook('onReady', async () => {
    const err = await listening
    if (err !== undefined) throw err
  })
  return { tokens, keys }
}
