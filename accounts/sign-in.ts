// The one door every way in ends at (STYLE.md, "one door"; auth-extensions §2, §3, §6): a
// password sign-in, a registration, a password reset, an identity provider's exchange and the
// renewal after a password change and a passkey each hand the user and what they proved to
// `complete`, which decides whether that is enough: for an account with a second factor, a
// password, a reset or a provider is not, and the answer is its challenge (an `mfaToken`),
// which `completeSecondFactor` takes with the code (or a passkey). A passkey that verified its
// user (accounts/passkeys.ts) is both factors: never challenged. Either starts the session with how and when
// its holder proved who they are, and signs its token. Routes call it and hand what it returns
// to the answer (fastify.answerSignIn, plugins/app/authenticate.ts); nothing else signs a token.
// No Fastify here: the signer is a port the jwt plugin fills (plugins/app/sign-in.ts).
import { randomUUID } from 'node:crypto'
import type { Kysely } from 'kysely'
import type { Client } from '../client-address.js'
import type { AuthMethod, Database, SessionMethod, UserRow } from '../db/types.js'
import { earliestTokenIat } from '../db/users.js'
import { InvalidCredentialsError, MfaCodeInvalidError, PasskeyInvalidError, UnauthorizedError } from '../errors.js'
import type { ChallengedWay, SecondFactor, SecondFactorAnswer, SecondFactorMethod } from './second-factor.js'
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
  /** POST /auth/passkey: a passkey's assertion with user verification, checked (accounts/passkeys.ts): both factors. */
  | { way: 'passkey' }

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
  /** After a recovery code: how many are left (the answer says so). */
  recoveryCodesLeft?: number
}

/** The first factor checked out; the account has a second: POST /auth/mfa with this token and a code. */
export interface SecondFactorRequired {
  outcome: 'second-factor-required'
  user: UserRow
  mfaToken: string
  methods: SecondFactorMethod[]
}

/** What a sign-in ends in; the answer decorator writes either, so routes need not tell them apart. */
export type SignInOutcome = SignedIn | SecondFactorRequired

/** The claims the door signs: spec §5.1's and a `jti` (the signer adds `iss`, `aud` and `exp`). */
export interface SessionClaims { sub: string, email: string, jti: string, iat: number }

export interface SignInDoor {
  /** Starts the session for what was proved and signs its token, or asks for the account's second factor. */
  complete: {
    (client: Client, user: UserRow, proof: Renewal | { way: 'registration' } | { way: 'passkey' }): Promise<SignedIn>
    (client: Client, user: UserRow, proof: Proof): Promise<SignInOutcome>
  }
  /**
   * The second factor of a sign-in `complete` challenged: the session starts in the transaction
   * that accepts the code. 401 MFA_TOKEN_INVALID (the challenge), MFA_CODE_INVALID (the code:
   * wrong, used, or replayed), PASSKEY_INVALID (a passkey that did not check out, or another
   * account's), 429 while the account's checks are suspended.
   */
  completeSecondFactor: (client: Client, mfaToken: string, answer: SecondFactorAnswer) => Promise<SignedIn>
}

export interface SignInDependencies {
  sessions: Pick<Sessions, 'start'>
  secondFactor: Pick<SecondFactor, 'isOn' | 'challenge' | 'openChallenge' | 'prove'>
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
  passkey: 'passkey',
  'password-change': 'password'
}

/** The ways a second factor follows, when the account has one. */
const CHALLENGED = new Set<Proof['way']>(['password', 'password-reset', 'provider'] satisfies ChallengedWay[])

function methodsOf (proof: Proof | Renewal): AuthMethod[] {
  switch (proof.way) {
    case 'provider': return ['provider']
    case 'passkey': return ['passkey']
    // The password again, and what the renewed session had proved besides (`external` says nothing).
    case 'password-change': return [...new Set<AuthMethod>(['password', ...proof.session.methods.filter((m) => m !== 'external')])]
    default: return ['password']
  }
}

export function signInDoor ({ sessions, secondFactor, sign, tokenLifetimeSeconds }: SignInDependencies): SignInDoor {
  /** The session for what was proved (in `tx`, when the caller's transaction has more to do), and its token. */
  async function startSession (client: Client, user: UserRow, proof: Proof | Renewal, methods: AuthMethod[], tx?: Kysely<Database>): Promise<SignedIn> {
    const now = Date.now()
    // Within the second of a password change, `iat` is the next second (db/users.ts, earliestTokenIat).
    const iat = Math.max(Math.floor(now / 1000), earliestTokenIat(user))
    const id = randomUUID()
    const authenticatedAt = new Date(now)
    // The session outlives its token by a minute: its row, ended or not, is never purged while the token works.
    const started = await sessions.start({
      id,
      userId: user.id,
      method: SESSION_METHOD[proof.way],
      methods,
      authenticatedAt,
      ...(proof.way === 'provider' && { provider: proof.provider }),
      client,
      expiresAt: new Date((iat + tokenLifetimeSeconds + 60) * 1000),
      // In a transaction (the second factor's), the challenge it used stands for the password.
      ...(tx === undefined && { password: user.password })
    }, tx)
    // The password changed (or was reset) while this sign-in was on its way: that change ended
    // every sign-in, this one too. A password that is no longer the account's is a wrong one.
    if (!started) throw proof.way === 'password' ? new InvalidCredentialsError() : new UnauthorizedError()
    // Exactly the claims of spec §5.1 plus `jti`, so other holders of the secret can read and sign the same tokens.
    const token = sign({ sub: user.id, email: user.email, jti: id, iat })
    return { outcome: 'signed-in', user, token, maxAgeSeconds: tokenLifetimeSeconds, session: { id, methods, authenticatedAt } }
  }

  async function complete (client: Client, user: UserRow, proof: Proof | Renewal): Promise<SignInOutcome> {
    if (CHALLENGED.has(proof.way as Proof['way']) && await secondFactor.isOn(user.id)) {
      const provider = proof.way === 'provider' ? proof.provider : undefined
      const { mfaToken, methods } = await secondFactor.challenge(user, proof.way as ChallengedWay, provider)
      return { outcome: 'second-factor-required', user, mfaToken, methods }
    }
    return startSession(client, user, proof, methodsOf(proof))
  }

  async function completeSecondFactor (client: Client, mfaToken: string, answer: SecondFactorAnswer): Promise<SignedIn> {
    const challenge = await secondFactor.openChallenge(client, mfaToken)
    const { user } = challenge
    const proof: Proof = challenge.way === 'provider' ? { way: 'provider', provider: challenge.provider ?? '' } : { way: challenge.way }
    const proved = await secondFactor.prove(client, user, answer, {
      recovery: true,
      challenge,
      wrong: async (_guessed, method) => method === 'passkey' ? new PasskeyInvalidError() : new MfaCodeInvalidError(),
      change: async (tx, method) => ({ value: await startSession(client, user, proof, [...methodsOf(proof), method], tx), emails: [] })
    })
    return proved.recoveryCodesLeft === undefined ? proved.value : { ...proved.value, recoveryCodesLeft: proved.recoveryCodesLeft }
  }

  return { complete: complete as SignInDoor['complete'], completeSecondFactor }
}
