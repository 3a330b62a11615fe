// Sign-in through OpenID Connect providers (docs/identity-providers.md; spec auth-extensions §1):
// start → the provider → callback → a one-time code → exchange, and linking and unlinking.
// The provider's side (discovery, PKCE, the code exchange, the ID token's checks) is the
// adapter's (accounts/identity-provider.ts); here: the flow kept server-side and bound to the
// browser that started it, who the identity is, and accounts made or matched without takeovers.
// No Fastify here: the routes carry cookies and redirects.
import { randomBytes, randomUUID, timingSafeEqual } from 'node:crypto'
import type { Kysely } from 'kysely'
import type { Client } from '../client-address.js'
import {
  createFlow, createIdentity, createSignInCode, deleteIdentity, findIdentity, listIdentities, lockUserSignInMethods, takeFlow, takeSignInCode
} from '../db/identities.js'
import { countPasskeys } from '../db/passkeys.js'
import { recordSecurityEvent } from '../db/security-events.js'
import { liveSessionStart } from '../db/sessions.js'
import type { Database, IdentityRow, UserRow } from '../db/types.js'
import { createUserWithPreferences, findUserByEmail, findUserById, isUniqueViolation, normalizeEmail } from '../db/users.js'
import {
  IdentityNotFoundError, LastSignInMethodError, ProviderNotFoundError, SignInCodeInvalidError, UnauthorizedError, ValidationError
} from '../errors.js'
import { isAcceptableEmail } from '../schemas/users.js'
import { hashToken } from '../token-hash.js'
import { IdentityProviderError, randomFlowSecrets, type IdentityProvider, type VerifiedIdentity } from './identity-provider.js'
import { recordedClient, type SignInLimits } from './limits.js'
import { needsVerifiedEmail } from './new-way-in.js'
import type { AccountMail } from './mail.js'
import { adoptToken, type PresentedToken } from './sessions.js'

/** A started flow waits this long for its callback (a person signing in at the provider). */
export const FLOW_TTL_MS = 10 * 60_000
/** The code handed to the web client works once, within this (spec: 60 s). */
export const SIGN_IN_CODE_TTL_MS = 60_000

/**
 * What the callback's redirect carries in `error=` (docs/identity-providers.md). Never a JSON
 * envelope: the browser is between the provider and the web client.
 */
export type CallbackError =
  | 'INVALID_STATE' // no such flow (unknown, used or expired state, or not exactly one), or another browser's
  | 'PROVIDER_NOT_FOUND' // a callback for a provider not configured here
  | 'PROVIDER_UNAVAILABLE' // the provider could not be reached or answered as none should
  | 'PROVIDER_REJECTED' // the provider refused (consent cancelled, code replayed or expired)
  | 'INVALID_ID_TOKEN' // the ID token failed verification: issuer, audience, nonce, expiry, signature
  | 'EMAIL_NOT_VERIFIED' // a new identity whose provider does not vouch for its email
  | 'EMAIL_INVALID' // a new identity whose vouched-for email is not one address registration accepts
  | 'ACCOUNT_EXISTS' // a new identity whose email has an account: its owner signs in and links it
  | 'IDENTITY_IN_USE' // linking an identity that signs another account in
  // Refusals and failures of ours, before or behind the flow: the route's error handler, or the catch below.
  | 'RATE_LIMITED' // past the client's global request limit
  | 'SERVICE_UNAVAILABLE' // starting, shutting down or overloaded: try again shortly
  | 'INVALID_REQUEST' // refused before it reached the flow
  | 'SERVER_ERROR' // an unexpected failure of ours (logged)

/**
 * A secret the browser keeps in a cookie named after `key` (one per flow, one per code, so two
 * flows in one browser do not overwrite each other): the callback, then the exchange, must
 * present it. Without it a flow or a code sent to someone else's browser would sign that
 * browser in to the sender's account (login CSRF).
 */
export interface BrowserBinding { key: string, secret: string, maxAgeMs: number }

export interface Started {
  /** Where to send the browser: the provider's authorization endpoint. */
  url: string
  binding: BrowserBinding
}

/** The cookie the browser presents for a binding's key, if any. */
export type BrowserSecrets = (key: string) => string | undefined

export interface CallbackResult {
  redirect: string
  /** The flow's binding, spent. */
  unbind?: string
  /** The one-time code's binding, to set. */
  bind?: BrowserBinding
}

/** The caller of a link: a signed-in user and the token they presented. */
export interface LinkCaller { user: UserRow, token: PresentedToken }

export interface ProviderSignIn {
  providers: () => Array<{ id: string, name: string }>
  /**
   * 404 PROVIDER_NOT_FOUND; 400 for a returnTo off our origins; 429 past the client's sign-in
   * attempts (each start is one, and stores a flow); an unreachable provider is a redirect with its error.
   */
  start: (client: Client, providerId: string, returnTo: string | undefined) => Promise<Started | { error: string }>
  /**
   * A flow that links the identity to the caller when it comes back, if the caller's session is
   * live then (a token signed elsewhere becomes a session for it). The route asks for a recent
   * step-up first (accounts/step-up.ts); 403 EMAIL_NOT_VERIFIED while the account's address is unconfirmed.
   */
  startLink: (client: Client, caller: LinkCaller, providerId: string, returnTo: string | undefined) => Promise<Started | { error: string }>
  /**
   * Always a redirect: to returnTo with `signin=<code>` (or `linked=<provider>`), or with `error=<CallbackError>`
   * (APP_URL's when no flow is known). Rejects only when no flow is known either.
   */
  callback: (providerId: string, callbackUrl: URL, secrets: BrowserSecrets, client: Client) => Promise<CallbackResult>
  /** Where a callback that failed before any flow was known sends the browser: APP_URL with `error=`. */
  failedCallback: (error: CallbackError) => string
  /** The user a one-time code signs in, the code used up; 400 SIGN_IN_CODE_INVALID, also from another browser. */
  exchange: (client: Client, code: string, secrets: BrowserSecrets) => Promise<{ user: UserRow, provider: string, unbind: string }>
  identities: (userId: string) => Promise<IdentityRow[]>
  /** 404 IDENTITY_NOT_FOUND; 409 LAST_SIGN_IN_METHOD when nothing else would sign the account in. */
  unlink: (user: UserRow, identityId: string, client: Client) => Promise<void>
}

export interface ProviderSignInDependencies {
  db: Kysely<Database>
  providers: IdentityProvider[]
  mail: AccountMail
  limits: SignInLimits
  /** The API's public URL (API_URL): the redirect URI is `<apiUrl>/auth/providers/<id>/callback`. */
  apiUrl: string
  /** Where the browser returns by default (APP_URL). */
  appUrl: string
  /** Origins returnTo may be on (APP_URL's and CORS_ORIGINS'). */
  allowedOrigins: string[]
  /** Where an unexpected failure behind a redirect is reported (the browser sees only its code). */
  warn: (err: unknown, message: string) => void
}

/** A binding's cookie key: the first 16 hex digits of the state's or code's hash (that hash is the stored key). */
const bindingKey = (hash: string): string => hash.slice(0, 16)
const randomToken = (): string => randomBytes(32).toString('base64url')
const sameHash = (a: string, b: string): boolean => a.length === b.length && timingSafeEqual(Buffer.from(a), Buffer.from(b))

function withParam (url: string, name: string, value: string): string {
  const target = new URL(url)
  target.searchParams.set(name, value)
  return target.href
}

const FAILURES: Record<IdentityProviderError['reason'], CallbackError> = {
  unavailable: 'PROVIDER_UNAVAILABLE',
  rejected: 'PROVIDER_REJECTED',
  'invalid-token': 'INVALID_ID_TOKEN'
}

/** The provider's email as registration would take it, or null when registration would refuse it. */
function acceptableEmail (email: string | null): string | null {
  if (email === null) return null
  const normalized = normalizeEmail(email)
  return isAcceptableEmail(normalized) ? normalized : null
}

/** A returned failure the callback turns into `error=`. */
class CallbackFailure extends Error {
  constructor (readonly code: CallbackError) { super(code) }
}

export function providerSignIn (deps: ProviderSignInDependencies): ProviderSignIn {
  const { db, mail, limits } = deps
  const byId = new Map(deps.providers.map((p) => [p.id, p]))
  const origins = new Set(deps.allowedOrigins)

  const providerOf = (id: string): IdentityProvider => {
    const provider = byId.get(id)
    if (provider === undefined) throw new ProviderNotFoundError()
    return provider
  }
  const redirectUri = (id: string) => `${deps.apiUrl.replace(/\/+$/, '')}/auth/providers/${encodeURIComponent(id)}/callback`

  function checkedReturnTo (returnTo: string | undefined): string {
    if (returnTo === undefined) return deps.appUrl
    let url: URL
    try {
      url = new URL(returnTo)
    } catch {
      throw new ValidationError(['must be an absolute URL on the web client\'s origin - returnTo'])
    }
    // Exactly an allowed origin: no open redirect (the one-time code would go with it).
    if (!origins.has(url.origin) || url.username !== '' || url.password !== '') {
      throw new ValidationError(['must be on the web client\'s origin (APP_URL or CORS_ORIGINS) - returnTo'])
    }
    return url.href
  }

  async function begin (client: Client, providerId: string, returnTo: string | undefined, link: { userId: string, sessionId: string } | null): Promise<Started | { error: string }> {
    const provider = providerOf(providerId)
    const target = checkedReturnTo(returnTo)
    // A sign-in attempt of this client, counted before the provider is asked or a flow stored:
    // the flows one client can leave behind are bounded by its attempts per window.
    await limits.admit(client)
    const secrets = randomFlowSecrets()
    let url: string
    try {
      url = await provider.authorizationUrl({ redirectUri: redirectUri(providerId), ...secrets })
    } catch (err) {
      // Nothing stored: the provider could not even be asked.
      if (err instanceof IdentityProviderError) return { error: withParam(target, 'error', FAILURES[err.reason]) }
      throw err
    }
    const browserSecret = randomToken()
    const stateHash = hashToken(secrets.state)
    await createFlow(db, {
      state_hash: stateHash,
      provider: providerId,
      nonce: secrets.nonce,
      code_verifier: secrets.codeVerifier,
      browser_hash: hashToken(browserSecret),
      return_to: target,
      link_user_id: link?.userId ?? null,
      link_session_id: link?.sessionId ?? null
    }, FLOW_TTL_MS)
    return { url, binding: { key: bindingKey(stateHash), secret: browserSecret, maxAgeMs: FLOW_TTL_MS } }
  }

  /** The user this identity signs in: known, or new when its verified email has no account. */
  async function signInUser (providerId: string, identity: VerifiedIdentity): Promise<UserRow> {
    const known = await findIdentity(db, identity.issuer, identity.subject)
    if (known !== undefined) {
      const user = await findUserById(db, known.user_id)
      if (user !== undefined) return user
    }
    // An unverified email is never matched, nor made an account: that address may be someone else's.
    if (identity.email === null || !identity.emailVerified) throw new CallbackFailure('EMAIL_NOT_VERIFIED')
    // Registration's rule: one mailbox the mail goes to and nowhere else (no "", no list, no CR/LF).
    const email = acceptableEmail(identity.email)
    if (email === null) throw new CallbackFailure('EMAIL_INVALID')
    // Never linked silently: an account made before its owner arrives is how accounts are taken over.
    if (await findUserByEmail(db, email) !== undefined) throw new CallbackFailure('ACCOUNT_EXISTS')
    const provider = providerOf(providerId)
    try {
      return await mail.transaction(async (tx) => {
        const user = await createUserWithPreferences(tx, {
          id: randomUUID(), name: identity.name?.trim().slice(0, 255) || null, email, passwordHash: null, emailVerified: true
        })
        await createIdentity(tx, { id: randomUUID(), user_id: user.id, provider: providerId, issuer: identity.issuer, subject: identity.subject, email })
        return { value: user, emails: [{ kind: 'welcome-verified', user, provider: provider.name }] }
      })
    } catch (err) {
      // The same email registered meanwhile, or the same identity's other callback won.
      if (isUniqueViolation(err)) {
        const winner = await findIdentity(db, identity.issuer, identity.subject)
        const user = winner && await findUserById(db, winner.user_id)
        if (user) return user
        throw new CallbackFailure('ACCOUNT_EXISTS')
      }
      throw err
    }
  }

  async function link (userId: string, sessionId: string, providerId: string, identity: VerifiedIdentity, client: Client): Promise<void> {
    // Ended meanwhile (signed out, "everywhere else", a password change or reset): no link.
    if (await liveSessionStart(db, userId, sessionId) === undefined) throw new CallbackFailure('INVALID_STATE')
    const known = await findIdentity(db, identity.issuer, identity.subject)
    if (known !== undefined) {
      if (known.user_id === userId) return
      throw new CallbackFailure('IDENTITY_IN_USE')
    }
    const provider = providerOf(providerId)
    try {
      await mail.transaction(async (tx) => {
        const user = await findUserById(tx, userId)
        if (user === undefined) return { value: undefined, emails: [] }
        await createIdentity(tx, {
          id: randomUUID(), user_id: userId, provider: providerId, issuer: identity.issuer, subject: identity.subject, email: acceptableEmail(identity.email)
        })
        await recordSecurityEvent(tx, { userId, type: 'identity-linked', provider: providerId, ...recordedClient(client) })
        return { value: undefined, emails: [{ kind: 'sign-in-method', user, change: 'added', what: `Sign-in with ${provider.name}` }] }
      })
    } catch (err) {
      if (isUniqueViolation(err)) throw new CallbackFailure('IDENTITY_IN_USE')
      throw err
    }
  }

  return {
    providers: () => deps.providers.map(({ id, name }) => ({ id, name })),

    start: (client, providerId, returnTo) => begin(client, providerId, returnTo, null),

    async startLink (client, { user, token }, providerId, returnTo) {
      providerOf(providerId)
      // A new way in is for the owner: one who proved it just now (the route's step-up), to an
      // address that is theirs (accounts/new-way-in.ts).
      needsVerifiedEmail(user)
      // The link completes only while this session lives: a token signed elsewhere becomes one.
      await adoptToken(db, user.id, token, client)
      return begin(client, providerId, returnTo, { userId: user.id, sessionId: token.jti })
    },

    async callback (providerId, callbackUrl, secrets, client) {
      const provider = byId.get(providerId)
      if (provider === undefined) return { redirect: withParam(deps.appUrl, 'error', 'PROVIDER_NOT_FOUND') }
      // Exactly one state, of a length ours can have: a repeated one is no flow's (and not looked up).
      const states = callbackUrl.searchParams.getAll('state')
      const state = states.length === 1 && states[0]!.length <= 512 ? states[0]! : undefined
      const stateHash = state === undefined ? undefined : hashToken(state)
      const flow = stateHash === undefined ? undefined : await takeFlow(db, stateHash)
      // No flow to return to: back to the web client's front page.
      if (flow === undefined || flow.provider !== providerId) return { redirect: withParam(deps.appUrl, 'error', 'INVALID_STATE') }
      const unbind = bindingKey(stateHash!)
      const fail = (code: CallbackError): CallbackResult => ({ redirect: withParam(flow.return_to, 'error', code), unbind })
      const browserSecret = secrets(unbind)
      if (browserSecret === undefined || !sameHash(hashToken(browserSecret), flow.browser_hash)) return fail('INVALID_STATE')
      try {
        const identity = await provider.verifyCallback({
          callbackUrl, redirectUri: redirectUri(providerId), state: state!, nonce: flow.nonce, codeVerifier: flow.code_verifier
        })
        if (flow.link_user_id !== null) {
          await link(flow.link_user_id, flow.link_session_id ?? '', providerId, identity, client)
          return { redirect: withParam(flow.return_to, 'linked', providerId), unbind }
        }
        const user = await signInUser(providerId, identity)
        const code = randomToken()
        const codeHash = hashToken(code)
        // The same browser secret, now under the code's key: only this browser may exchange it.
        await createSignInCode(db, { hash: codeHash, userId: user.id, provider: providerId, browserHash: flow.browser_hash }, SIGN_IN_CODE_TTL_MS)
        return {
          redirect: withParam(flow.return_to, 'signin', code),
          unbind,
          bind: { key: bindingKey(codeHash), secret: browserSecret, maxAgeMs: SIGN_IN_CODE_TTL_MS }
        }
      } catch (err) {
        if (err instanceof CallbackFailure) return fail(err.code)
        if (err instanceof IdentityProviderError) {
          deps.warn(err, 'identity provider sign-in failed')
          return fail(FAILURES[err.reason])
        }
        // Ours (a query that failed, say): the flow is spent, so back to its returnTo, never a 500 page.
        deps.warn(err, 'identity provider callback failed unexpectedly')
        return fail('SERVER_ERROR')
      }
    },

    failedCallback: (error) => withParam(deps.appUrl, 'error', error),

    async exchange (client, code, secrets) {
      const attempt = await limits.admit(client)
      const codeHash = code.length > 256 ? undefined : hashToken(code)
      const taken = codeHash === undefined ? undefined : await takeSignInCode(db, codeHash)
      // Used up either way: a code another browser presented is spent, not left to try again.
      const browserSecret = codeHash === undefined ? undefined : secrets(bindingKey(codeHash))
      const sameBrowser = taken !== undefined && browserSecret !== undefined && sameHash(hashToken(browserSecret), taken.browser_hash)
      const user = sameBrowser ? await findUserById(db, taken.user_id) : undefined
      if (taken === undefined || user === undefined) throw await attempt.failed(new SignInCodeInvalidError())
      return { user, provider: taken.provider, unbind: bindingKey(codeHash!) }
    },

    identities: (userId) => listIdentities(db, userId),

    async unlink (user, identityId, client) {
      await mail.transaction(async (tx) => {
        const methods = await lockUserSignInMethods(tx, user.id, deps.providers.map((p) => p.id))
        if (methods === undefined) throw new UnauthorizedError()
        const removed = await deleteIdentity(tx, user.id, identityId)
        if (removed === undefined) throw new IdentityNotFoundError()
        // The removed one counted only if its provider is configured.
        const left = methods.identities - (byId.has(removed.provider) ? 1 : 0)
        // Passkeys are ways in too (the user row is locked: a passkey's removal waits for this one).
        if (!methods.hasPassword && left < 1 && await countPasskeys(tx, user.id) < 1) throw new LastSignInMethodError()
        await recordSecurityEvent(tx, { userId: user.id, type: 'identity-unlinked', provider: removed.provider, ...recordedClient(client) })
        const name = byId.get(removed.provider)?.name ?? removed.provider
        return { value: undefined, emails: [{ kind: 'sign-in-method', user, change: 'removed', what: `Sign-in with ${name}` }] }
      })
    }
  }
}
