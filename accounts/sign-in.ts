// The one door every way in ends at (STYLE.md, "one door"; auth-extensions §2, §6): a password
// sign-in, a registration, a password reset, an identity provider's exchange and the renewal
// after a password change (next: passkeys) each hand the user and what they proved to
// `complete`, which decides whether that is enough (the second factor of an account that has
// one will be decided here, §3, and nowhere else), starts the session with how and when its
// holder proved who they are, and signs its token. Routes call it and hand what it returns to
// the answer (fastify.answerSignIn, plugins/app/authenticate.ts); nothing else signs a token.
// No Fastify here: the signer is a port the jwt plugin fills (plugins/app/sign-in.ts).
import { randomUUID } from 'node:crypto'
import type { Client } from '../client-address.js'
import type { AuthMethod, SessionMethod, UserRow } from '../db/types.js'
import { earliestTokenIat } from '../db/users.js'
import type { PresentedToken, Sessions } from './sessions.js'

/** What a way in proved. */
export type Proof =
  /** POST /auth/login: the account's password. */
  | { way: 'password' }
  /** A new account, with the password just chosen. */
  | { way: 'registration' }
  /** The emailed reset link, and a new password. */
  | { way: 'password-reset' }
  /** An identity provider's sign-in, exchanged for its one-time code. */
  | { way: 'provider', provider: string }

/**
 * A signed-in user changed their password (checking the current one): every session ended, and
 * the caller's is renewed with the factors it had proved. Never asks for a second factor.
 */
export interface Renewal { way: 'password-change', session: PresentedToken }

export interface SignedIn {
  outcome: 'signed-in'
  user: UserRow
  /** The session's token (a JWT), for the body and the cookie. */
  token: string
  /** How long the token lives, seconds: the cookie's Max-Age. */
  maxAgeSeconds: number
  session: { id: string, methods: AuthMethod[], authenticatedAt: Date }
}

/**
 * What a sign-in ends in. Today always signed in; with a second factor (§3) also
 * `{ outcome: 'second-factor-required', mfaToken, methods }`, which the same answer decorator
 * writes, so no route changes.
 */
export type SignInOutcome = SignedIn

/** The claims the door signs: spec §5.1's and a `jti` (the signer adds `iss`, `aud` and `exp`). */
export interface SessionClaims { sub: string, email: string, jti: string, iat: number }

export interface SignInDoor {
  /** Starts the session for what was proved and signs its token (or, later, asks for the second factor). */
  complete: {
    (client: Client, user: UserRow, proof: Renewal): Promise<SignedIn>
    (client: Client, user: UserRow, proof: Proof): Promise<SignInOutcome>
  }
}

export interface SignInDependencies {
  sessions: Pick<Sessions, 'start'>
  /** Signs a token with these claims (the jwt plugin's signer: HS256, issuer, audience, lifetime). */
  sign: (claims: SessionClaims) => string
  /** How long a token lives (the signer's `exp`), seconds. */
  tokenLifetimeSeconds: number
}

/** The session's `method`, as GET /account/sessions has shown it since sessions began. */
const SESSION_METHOD: Record<Proof['way'] | Renewal['way'], SessionMethod> = {
  password: 'password',
  registration: 'registration',
  'password-reset': 'password-reset',
  provider: 'provider',
  'password-change': 'password'
}

function methodsOf (proof: Proof | Renewal): AuthMethod[] {
  switch (proof.way) {
    case 'provider': return ['provider']
    // The password again, and what the renewed session had proved besides (`external` says nothing).
    case 'password-change': return [...new Set<AuthMethod>(['password', ...proof.session.methods.filter((m) => m !== 'external')])]
    default: return ['password']
  }
}

export function signInDoor ({ sessions, sign, tokenLifetimeSeconds }: SignInDependencies): SignInDoor {
  async function complete (client: Client, user: UserRow, proof: Proof | Renewal): Promise<SignInOutcome> {
    const methods = methodsOf(proof)
    const now = Date.now()
    // Within the second of a password change, `iat` is the next second (db/users.ts, earliestTokenIat).
    const iat = Math.max(Math.floor(now / 1000), earliestTokenIat(user))
    const id = randomUUID()
    const authenticatedAt = new Date(now)
    // The session outlives its token by a minute: its row, ended or not, is never purged while the token works.
    await sessions.start({
      id,
      userId: user.id,
      method: SESSION_METHOD[proof.way],
      methods,
      authenticatedAt,
      ...(proof.way === 'provider' && { provider: proof.provider }),
      client,
      expiresAt: new Date((iat + tokenLifetimeSeconds + 60) * 1000)
    })
    // Exactly the claims of spec §5.1 plus `jti`, so other holders of the secret can read and sign the same tokens.
    const token = sign({ sub: user.id, email: user.email, jti: id, iat })
    return { outcome: 'signed-in', user, token, maxAgeSeconds: tokenLifetimeSeconds, session: { id, methods, authenticatedAt } }
  }
  return { complete: complete as SignInDoor['complete'] }
}
