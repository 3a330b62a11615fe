// Step-up (auth-extensions §6, docs/sessions.md): what adds a lasting way in (linking an
// identity, the second factor's enrolment and codes, a passkey; API keys next) needs a
// session whose holder proved who they are within STEP_UP_MAX_AGE_S, so a stolen older token
// cannot add one. Routes ask for it with `config: { stepUp: true }`; the authentication hook
// judges it on the principal the token check loaded (no query; one, to say which methods, only
// when it refuses). POST /auth/step-up proves it again, for the caller's session only, with the
// password, a TOTP code or a passkey (presence is enough: the session is the other factor);
// never a recovery code. A session that signed in with a recovery code is fresh only once it
// stepped up with a TOTP code or a passkey. No Fastify here.
import type { Kysely } from 'kysely'
import type { Client } from '../client-address.js'
import type { Database } from '../db/types.js'
import { ForbiddenError, MfaCodeIncorrectError, PasskeyRejectedError, PasswordNotSetError, stepUpRequired } from '../errors.js'
import type { Principal } from './credentials.js'
import { checkCurrentPassword } from './current-password.js'
import type { SignInLimits } from './limits.js'
import { PasskeyRefusal, type AuthenticationOptions, type AuthenticationResponse, type Passkeys } from './passkeys.js'
import type { SecondFactor } from './second-factor.js'
import type { Passwords } from './service.js'
import type { Sessions } from './sessions.js'

/** What POST /auth/step-up takes; a recovery code never (§3). */
export type StepUpMethod = 'password' | 'totp' | 'passkey'

/** A session signed in with a recovery code: only a TOTP code (or a passkey) steps it up. */
const signedInWithRecovery = (principal: Principal): boolean => principal.session?.methods.includes('recovery') === true

/** What the principal's session can step up with: the password, if the account has one, a TOTP code if it is on, a passkey if it has one. */
export function stepUpMethodsOf (principal: Principal, has: { totp: boolean, passkey: boolean }): StepUpMethod[] {
  const methods: StepUpMethod[] = []
  if (principal.user.password !== null && !signedInWithRecovery(principal)) methods.push('password')
  if (has.totp) methods.push('totp')
  if (has.passkey) methods.push('passkey')
  return methods
}

/** Whether the principal is a session whose holder signed in or stepped up within `maxAgeSeconds` of `now`. */
export function isRecentlyVerified (principal: Principal, maxAgeSeconds: number, now = Date.now()): boolean {
  const { session } = principal
  return session !== null && now - session.verifiedAt <= maxAgeSeconds * 1000
}

export interface SteppedUp {
  steppedUpAt: Date
  /** Until when the session passes the step-up check. */
  freshUntil: Date
  /** The `sign_in_device` cookie: a correct password, like a sign-in, marks the device. */
  deviceCookie?: string
}

export interface StepUp {
  /** STEP_UP_MAX_AGE_S */
  maxAgeSeconds: number
  /** 403 STEP_UP_REQUIRED, with what the session can step up with, unless it is recently verified. */
  assertFresh: (principal: Principal) => Promise<void>
  /**
   * The caller's session proves its holder again with the account's password. 400
   * INVALID_CURRENT_PASSWORD for a wrong one (a failed sign-in of the account: limited and
   * locked like one), 400 PASSWORD_NOT_SET for an account without, 429 past the sign-in limits,
   * 403 STEP_UP_REQUIRED for a session that signed in with a recovery code.
   */
  withPassword: (client: Client, principal: Principal, password: string) => Promise<SteppedUp>
  /**
   * The same with a TOTP code: 400 MFA_CODE_INCORRECT for a wrong or used one (counted like a
   * wrong second factor at sign-in), 409 MFA_NOT_ENABLED, 429 while suspended.
   */
  withCode: (client: Client, principal: Principal, code: string) => Promise<SteppedUp>
  /** Options for a step-up with one of the user's passkeys, for the caller's session only. */
  passkeyOptions: (principal: Principal) => Promise<AuthenticationOptions>
  /**
   * The same with a passkey's answer to those options (presence is enough): 400
   * PASSKEY_REJECTED when it does not check out (another session's or user's challenge, used or
   * expired, another origin, a bad signature, a counter that went back), counted like a failed
   * sign-in of the account; 429 past the sign-in limits.
   */
  withPasskey: (client: Client, principal: Principal, response: AuthenticationResponse) => Promise<SteppedUp>
}

export interface StepUpDependencies {
  passwords: Passwords
  limits: SignInLimits
  sessions: Pick<Sessions, 'stepUp' | 'failedSignIn'>
  secondFactor: Pick<SecondFactor, 'isOn' | 'prove'>
  passkeys: Pick<Passkeys, 'has' | 'optionsFor' | 'check' | 'accept'>
  /** Runs `change` in one transaction (the passkey's counter and the step-up together). */
  transaction: <T>(change: (tx: Kysely<Database>) => Promise<T>) => Promise<T>
  maxAgeSeconds: number
}

export function stepUpService ({ passwords, limits, sessions, secondFactor, passkeys, transaction, maxAgeSeconds }: StepUpDependencies): StepUp {
  const fresh = (steppedUpAt: Date, deviceCookie?: string): SteppedUp =>
    ({ steppedUpAt, freshUntil: new Date(steppedUpAt.getTime() + maxAgeSeconds * 1000), ...(deviceCookie !== undefined && { deviceCookie }) })
  const refusal = async (principal: Principal): Promise<Error> => {
    const [totp, passkey] = await Promise.all([secondFactor.isOn(principal.user.id), passkeys.has(principal.user.id)])
    return stepUpRequired({ methods: stepUpMethodsOf(principal, { totp, passkey }), maxAgeSeconds })
  }

  return {
    maxAgeSeconds,
    async assertFresh (principal) {
      if (!isRecentlyVerified(principal, maxAgeSeconds)) throw await refusal(principal)
    },

    async withPassword (client, principal, password) {
      const { user, session } = principal
      // A credential that is no session (an API key) has nothing to step up.
      if (session === null) throw new ForbiddenError()
      if (user.password === null) throw new PasswordNotSetError()
      if (signedInWithRecovery(principal)) throw await refusal(principal)
      const deviceCookie = await checkCurrentPassword({ passwords, limits, sessions }, client, user, password)
      return fresh(await sessions.stepUp(user.id, session, 'password', client), deviceCookie)
    },

    async withCode (client, principal, code) {
      const { user, session } = principal
      if (session === null) throw new ForbiddenError()
      const attempt = await limits.admit(client, user.email)
      const { value: steppedUpAt } = await secondFactor.prove(client, user, { code }, {
        // A replayed code is no guess: refused, but not counted against the account.
        wrong: async (guessed) => guessed ? attempt.failed(new MfaCodeIncorrectError()) : new MfaCodeIncorrectError(),
        change: async (tx) => ({ value: await sessions.stepUp(user.id, session, 'totp', client, tx), emails: [] })
      })
      return fresh(steppedUpAt)
    },

    async passkeyOptions ({ user, session }) {
      if (session === null) throw new ForbiddenError()
      return passkeys.optionsFor('step-up', user.id, { sessionId: session.jti })
    },

    async withPasskey (client, principal, response) {
      const { user, session } = principal
      if (session === null) throw new ForbiddenError()
      const attempt = await limits.admit(client, user.email)
      const refused = async (): Promise<Error> => {
        sessions.failedSignIn(user.id, client, 'passkey')
        return attempt.failed(new PasskeyRejectedError())
      }
      let assertion
      try {
        // Made for this session of this user: a challenge of another is refused.
        assertion = await passkeys.check(client, response, 'step-up', { userId: user.id, sessionId: session.jti }, false)
      } catch (err) {
        if (err instanceof PasskeyRefusal) throw await refused()
        throw err
      }
      const steppedUpAt = await transaction(async (tx) => {
        // Compare-and-set: another request moved the counter first.
        if (!await passkeys.accept(tx, assertion)) return undefined
        return sessions.stepUp(user.id, session, 'passkey', client, tx)
      })
      if (steppedUpAt === undefined) throw new PasskeyRejectedError()
      return fresh(steppedUpAt)
    }
  }
}
