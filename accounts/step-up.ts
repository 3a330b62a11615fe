// Step-up (auth-extensions §6, docs/sessions.md): what adds a lasting way in (linking an
// identity today; TOTP, recovery codes, passkeys and API keys next) needs a session whose holder
// proved who they are within STEP_UP_MAX_AGE_S, so a stolen older token cannot add one. Routes
// ask for it with `config: { stepUp: true }`; the authentication hook judges it on the principal
// the token check loaded (no query). POST /auth/step-up proves it again, for the caller's
// session only. No Fastify here.
import type { Client } from '../client-address.js'
import type { UserRow } from '../db/types.js'
import { ForbiddenError, InvalidCurrentPasswordError, PasswordNotSetError, stepUpRequired } from '../errors.js'
import type { Principal } from './credentials.js'
import type { SignInLimits } from './limits.js'
import type { Passwords } from './service.js'
import type { Sessions } from './sessions.js'

/** What POST /auth/step-up takes; a recovery code never (§3). */
export type StepUpMethod = 'password' | 'totp' | 'passkey'

/** What the account can step up with: its password, if it has one (a TOTP code and passkeys next). */
export const stepUpMethodsOf = (user: Pick<UserRow, 'password'>): StepUpMethod[] => user.password === null ? [] : ['password']

/**
 * 403 STEP_UP_REQUIRED, with what the account can step up with, unless the principal is a
 * session whose holder signed in or stepped up within `maxAgeSeconds` of `now`.
 */
export function assertRecentlyVerified (principal: Principal, maxAgeSeconds: number, now = Date.now()): void {
  const { session } = principal
  if (session !== null && now - session.verifiedAt <= maxAgeSeconds * 1000) return
  throw stepUpRequired({ methods: stepUpMethodsOf(principal.user), maxAgeSeconds })
}

export interface SteppedUp {
  steppedUpAt: Date
  /** Until when the session passes the step-up check. */
  freshUntil: Date
  /** The `sign_in_device` cookie: a correct password, like a sign-in, marks the device. */
  deviceCookie: string
}

export interface StepUp {
  /** STEP_UP_MAX_AGE_S */
  maxAgeSeconds: number
  /**
   * The caller's session proves its holder again with the account's password. 400
   * INVALID_CURRENT_PASSWORD for a wrong one (a failed sign-in of the account: limited and
   * locked like one), 400 PASSWORD_NOT_SET for an account without, 429 past the sign-in limits.
   */
  withPassword: (client: Client, principal: Principal, password: string) => Promise<SteppedUp>
}

export interface StepUpDependencies {
  passwords: Passwords
  limits: SignInLimits
  sessions: Pick<Sessions, 'stepUp' | 'failedSignIn'>
  maxAgeSeconds: number
}

export function stepUpService ({ passwords, limits, sessions, maxAgeSeconds }: StepUpDependencies): StepUp {
  return {
    maxAgeSeconds,
    async withPassword (client, { user, session }, password) {
      // A credential that is no session (an API key) has nothing to step up.
      if (session === null) throw new ForbiddenError()
      if (user.password === null) throw new PasswordNotSetError()
      // A stolen session guessing the password costs what guessing at sign-in does, on the same account's counts.
      const attempt = await limits.admit(client, user.email)
      passwords.admit()
      if (!await passwords.verify(password, user.password)) {
        sessions.failedSignIn(user.id, client)
        throw await attempt.failed(new InvalidCurrentPasswordError())
      }
      const steppedUpAt = await sessions.stepUp(user.id, session, 'password', client)
      return { steppedUpAt, freshUntil: new Date(steppedUpAt.getTime() + maxAgeSeconds * 1000), deviceCookie: await attempt.succeeded(user.email) }
    }
  }
}
