// The account's current password, proved again by a signed-in user (a step-up, turning the
// second factor on or off, new recovery codes): checked like a sign-in, by the limits'
// protocol (accounts/limits.ts: admit → check → failed or succeeded), so a stolen session
// guessing the password costs what guessing at sign-in does, on the same account's counts.
// No Fastify here.
import type { Client } from '../client-address.js'
import type { UserRow } from '../db/types.js'
import { InvalidCurrentPasswordError, PasswordNotSetError } from '../errors.js'
import type { SignInLimits } from './limits.js'
import type { Passwords } from './service.js'
import type { Sessions } from './sessions.js'

export interface CurrentPasswordDependencies {
  passwords: Passwords
  limits: SignInLimits
  sessions: Pick<Sessions, 'failedSignIn'>
}

/**
 * 400 PASSWORD_NOT_SET for an account without one, 429 past the sign-in limits (or the hashing
 * pool's 503), 400 INVALID_CURRENT_PASSWORD for a wrong one (a failed sign-in of the account).
 * Right: the `sign_in_device` cookie, as a sign-in gives.
 */
export async function checkCurrentPassword ({ passwords, limits, sessions }: CurrentPasswordDependencies, client: Client, user: UserRow, password: string): Promise<string> {
  if (user.password === null) throw new PasswordNotSetError()
  const attempt = await limits.admit(client, user.email)
  passwords.admit()
  if (!await passwords.verify(password, user.password)) {
    sessions.failedSignIn(user.id, client)
    throw await attempt.failed(new InvalidCurrentPasswordError())
  }
  return attempt.succeeded(user.email)
}
