// What adds a lasting way in or a factor (linking an identity, registering a passkey, turning
// on TOTP) goes only to an account whose address is confirmed. Anyone can register someone
// else's address and wait for its owner; the owner then takes the account back with a password
// reset, which ends every session and API key but keeps identities, passkeys and the second
// factor (a reset never turns TOTP off, auth-extensions §3). So such an account must hold none
// of them: an identity or a passkey would let the registrant back in after the reset, and a
// factor whose seed they hold would lock the owner out of their own address.
import type { UserRow } from '../db/types.js'
import { EmailNotVerifiedError } from '../errors.js'

/** 403 EMAIL_NOT_VERIFIED while the user's address is unconfirmed. */
export function needsVerifiedEmail (user: Pick<UserRow, 'email_verified'>): void {
  if (user.email_verified === null) throw new EmailNotVerifiedError()
}
