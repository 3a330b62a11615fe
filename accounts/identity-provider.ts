// Sign-in with an OpenID Connect provider (docs: spec auth-extensions §1), behind an interface of
// ours: openid-client (the certified relying party) does discovery, PKCE, the code exchange and
// the ID token's checks; nothing of its types leaves this file, and every failure becomes an
// IdentityProviderError saying which of three things went wrong.
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto'
import type * as OpenIdClient from 'openid-client'

/**
 * openid-client, loaded by the first discovery (start-up, issue 34: most instances have no
 * provider, and it is ~16 ms of modules). Every use below comes after `await configuration()`.
 */
let oidc: typeof OpenIdClient
const loadOpenIdClient = async (): Promise<typeof OpenIdClient> => (oidc ??= await import('openid-client'))

export interface ProviderSettings {
  /** Ours: the path segment and configuration name (`google`). */
  id: string
  /** For display (`Google`). */
  name: string
  /** The issuer identifier; discovery reads `<issuer>/.well-known/openid-configuration`. */
  issuer: string
  clientId: string
  clientSecret: string
}

export interface VerifiedIdentity {
  /** The ID token's `iss`: with `subject`, what identifies the identity. */
  issuer: string
  subject: string
  email: string | null
  /** Only when the provider said `email_verified: true` (not `"true"`, not absent). */
  emailVerified: boolean
  name: string | null
}

/** The secrets of one sign-in, kept by the caller between the start and the callback. */
export interface FlowSecrets { state: string, nonce: string, codeVerifier: string }

/**
 * - `unavailable`: the provider could not be reached or did not answer as one (down, timed out,
 *   5xx, discovery failed): worth trying again later.
 * - `rejected`: the provider or the callback refused this sign-in (`?error=` such as a cancelled
 *   consent, a state that is not this flow's, a code refused as replayed, expired or not ours).
 * - `invalid-token`: the provider's answer failed verification (ID token issuer, audience, nonce,
 *   expiry or signature; userinfo for another subject).
 */
export type IdentityProviderFailure = 'unavailable' | 'rejected' | 'invalid-token'

/** Its message names what failed, never a code, token or secret. */
export class IdentityProviderError extends Error {
  override readonly name = 'IdentityProviderError'

  constructor (readonly providerId: string, readonly reason: IdentityProviderFailure, message: string) {
    super(`${providerId}: ${message}`)
  }
}

export interface IdentityProvider {
  readonly id: string
  readonly name: string
  /** Where to send the browser: the authorization code flow with PKCE (S256), state and nonce. */
  authorizationUrl: (p: { redirectUri: string } & FlowSecrets) => Promise<string>
  /**
   * Checks the callback against this flow's secrets, exchanges its code at the token endpoint,
   * and verifies the ID token (issuer, audience, nonce, expiry, signature by the provider's JWKS).
   * `redirectUri` is the one given to authorizationUrl: the token request must repeat it exactly,
   * whatever URL the callback arrived on (behind a proxy, not the same).
   */
  verifyCallback: (p: { callbackUrl: URL, redirectUri: string } & FlowSecrets) => Promise<VerifiedIdentity>
}

const SCOPE = 'openid email profile'
const DEFAULT_TIMEOUT_MS = 5000
const LOOPBACK_HOSTS = new Set(['127.0.0.1', '[::1]', 'localhost'])

/** 32 random bytes, base64url: openid-client's randomState, randomNonce and randomPKCECodeVerifier. */
const random32 = () => randomBytes(32).toString('base64url')

export function randomFlowSecrets (): FlowSecrets {
  return { state: random32(), nonce: random32(), codeVerifier: random32() }
}

/**
 * An identity provider found by discovery from its issuer. Discovery happens on first use and
 * is kept once it succeeds; a failed one is tried again by the next call. Every request (discovery,
 * token, JWKS, userinfo) is bounded by `timeoutMs` (default 5 s).
 */
export function openIdProvider (settings: ProviderSettings, options: { timeoutMs?: number } = {}): IdentityProvider {
  const { id, name, clientId, clientSecret } = settings
  const issuer = issuerUrl(settings)
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS
  if (!(timeoutMs > 0)) throw new Error(`OIDC provider ${id}: timeoutMs must be positive`)
  // Plain http only to a provider on this machine (tests, local development); openid-client
  // refuses http otherwise, and so do we, at configuration time, for any other host.
  const insecure = issuer.protocol === 'http:'
  const fail = (reason: IdentityProviderFailure, message: string) => new IdentityProviderError(id, reason, message)

  let discovered: Promise<OpenIdClient.Configuration> | undefined
  function configuration (): Promise<OpenIdClient.Configuration> {
    discovered ??= loadOpenIdClient().then((client) => client.discovery(issuer, clientId, clientSecret, client.ClientSecretBasic(clientSecret), {
      timeout: timeoutMs / 1000,
      execute: [
        // openid-client does not check the signature of an ID token that came straight from the
        // token endpoint over TLS unless asked: we ask, so that the JWKS signs every identity.
        client.enableNonRepudiationChecks,
        ...(insecure ? [client.allowInsecureRequests] : [])
      ]
    })).catch((error: unknown) => {
      discovered = undefined
      throw fail('unavailable', `discovery failed (${describe(error)})`)
    })
    return discovered
  }

  return {
    id,
    name,
    async authorizationUrl ({ redirectUri, state, nonce, codeVerifier }) {
      assertSecrets({ state, nonce, codeVerifier })
      const config = await configuration()
      const codeChallenge = await oidc.calculatePKCECodeChallenge(codeVerifier)
      try {
        return oidc.buildAuthorizationUrl(config, {
          redirect_uri: redirectUri,
          scope: SCOPE,
          state,
          nonce,
          code_challenge: codeChallenge,
          code_challenge_method: 'S256'
        }).href
      } catch (error) {
        throw fail('unavailable', `no usable authorization endpoint (${describe(error)})`)
      }
    },

    async verifyCallback ({ callbackUrl, redirectUri, state, nonce, codeVerifier }) {
      assertSecrets({ state, nonce, codeVerifier })
      const params = callbackUrl.searchParams
      // The callback's own checks come first and are ours, before any request: so that what the
      // callback carries (forged, another sign-in's, a refusal) is told apart from what
      // the token endpoint answers below. openid-client checks state and iss again.
      for (const param of ['state', 'code', 'error', 'iss']) {
        if (params.getAll(param).length > 1) throw fail('rejected', `the callback repeats "${param}"`)
      }
      if (!sameSecret(params.get('state'), state)) throw fail('rejected', 'the callback\'s state is not this sign-in\'s')
      const error = params.get('error')
      if (error !== null) throw fail('rejected', `the provider refused the sign-in (${safeCode(error)})`)
      if (params.get('code') === null) throw fail('rejected', 'the callback carries no code')

      const config = await configuration()
      const server = config.serverMetadata()
      const iss = params.get('iss')
      if (iss !== null ? iss !== server.issuer : server.authorization_response_iss_parameter_supported === true) {
        throw fail('rejected', 'the callback names another issuer')
      }

      const current = new URL(redirectUri)
      current.search = callbackUrl.search
      let tokens: Awaited<ReturnType<typeof OpenIdClient.authorizationCodeGrant>>
      try {
        tokens = await oidc.authorizationCodeGrant(config, current, {
          expectedState: state,
          expectedNonce: nonce,
          pkceCodeVerifier: codeVerifier,
          idTokenExpected: true
        })
      } catch (error) {
        throw classify(error, 'code exchange')
      }
      const claims = tokens.claims()
      if (claims === undefined) throw fail('invalid-token', 'no ID token')

      let email = typeof claims.email === 'string' ? claims.email : null
      let emailVerified = claims.email_verified === true
      let nameClaim = typeof claims.name === 'string' ? claims.name : null
      // A provider may put the scope's claims in userinfo only (OIDC Core 5.4: when it issues an
      // access token, which a code flow does). Asked only then, with the access token just
      // received over TLS from the token endpoint; openid-client checks its `sub` is the ID token's.
      if (email === null && server.userinfo_endpoint !== undefined) {
        let info: Awaited<ReturnType<typeof OpenIdClient.fetchUserInfo>>
        try {
          info = await oidc.fetchUserInfo(config, tokens.access_token, claims.sub)
        } catch (error) {
          throw classify(error, 'userinfo')
        }
        email = typeof info.email === 'string' ? info.email : null
        emailVerified = info.email_verified === true
        nameClaim ??= typeof info.name === 'string' ? info.name : null
      }
      return { issuer: claims.iss, subject: claims.sub, email, emailVerified, name: nameClaim }
    }
  }

  /** Which of our three failures an openid-client error after the callback's checks is. */
  function classify (error: unknown, step: string): IdentityProviderError {
    if (error instanceof oidc.ResponseBodyError || error instanceof oidc.WWWAuthenticateChallengeError) {
      if (error.status >= 500) return fail('unavailable', `${step}: the provider answered ${error.status}`)
      const code = error instanceof oidc.ResponseBodyError ? error.error : 'authentication challenge'
      return fail('rejected', `${step}: the provider refused (${error.status} ${safeCode(code)})`)
    }
    if (error instanceof oidc.AuthorizationResponseError) return fail('rejected', `${step}: the provider refused the sign-in (${safeCode(error.error)})`)
    if (error instanceof oidc.ClientError) {
      switch (error.code) {
        case 'OAUTH_TIMEOUT':
        case 'OAUTH_ABORT':
        case 'OAUTH_RESPONSE_IS_NOT_CONFORM':
        case 'OAUTH_RESPONSE_IS_NOT_JSON':
        case 'OAUTH_HTTP_REQUEST_FORBIDDEN':
        case 'OAUTH_REQUEST_PROTOCOL_FORBIDDEN':
          return fail('unavailable', `${step}: ${describe(error)}`)
        default:
          // Claim comparisons (iss, aud, azp, nonce), timestamps (exp, iat), key selection and
          // signature, a malformed or missing ID token, userinfo for another subject.
          return fail('invalid-token', `${step}: ${describe(error)}`)
      }
    }
    // openid-client's TypeErrors for arguments it cannot use are our bug, not the provider's.
    if (error instanceof TypeError && /^ERR_INVALID_ARG/.test(String((error as { code?: unknown }).code))) throw error
    // fetch's own failure (refused, reset, DNS): a TypeError with a cause.
    return fail('unavailable', `${step}: ${describe(error)}`)
  }
}

/** The issuer as a URL, refused unless https or http to a loopback host. */
function issuerUrl ({ id, issuer }: ProviderSettings): URL {
  const url = URL.parse(issuer)
  if (url === null) throw new Error(`OIDC provider ${id}: issuer is not a URL`)
  if (url.protocol === 'https:') return url
  if (url.protocol === 'http:' && LOOPBACK_HOSTS.has(url.hostname)) return url
  throw new Error(`OIDC provider ${id}: issuer must be https (http only to 127.0.0.1, ::1 or localhost), got ${url.protocol}//${url.host}`)
}

/** A flow without its secrets is the caller's bug: thrown before any request spends the code. */
function assertSecrets (secrets: FlowSecrets): void {
  for (const [name, value] of Object.entries(secrets)) {
    if (typeof value !== 'string' || value === '') throw new TypeError(`the flow's ${name} is missing`)
  }
}

/** Constant-time equality of two secrets of any length. */
function sameSecret (given: string | null, expected: string): boolean {
  if (given === null) return false
  const digest = (value: string) => createHash('sha256').update(value).digest()
  return timingSafeEqual(digest(given), digest(expected))
}

/** An OAuth error code as the provider sent it, when it looks like one (it is logged). */
function safeCode (code: string): string {
  return /^[\w.-]{1,64}$/.test(code) ? code : 'unrecognised error code'
}

/**
 * What openid-client said, without what it carries: its messages and codes are fixed strings
 * (the inner one names a claim, never its value); its `cause` holds responses, claims and
 * callback parameters, codes included, so is never passed on.
 */
function describe (error: unknown): string {
  if (!(error instanceof Error)) return 'unknown error'
  const inner = error.cause instanceof Error ? error.cause : undefined
  const codeOf = (e: Error | undefined) => {
    const code = (e as { code?: unknown } | undefined)?.code
    return typeof code === 'string' ? code : undefined
  }
  const parts = [error.message, inner?.message, codeOf(error), codeOf(inner)]
  return [...new Set(parts.filter((part) => part !== undefined))].join(': ')
}
