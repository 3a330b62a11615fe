// Accounts, as the routes ask for them: sign-up, sign-in, a profile change, password reset
// and email verification. Each runs the limits' protocol (accounts/limits.ts: admit → check →
// failed or succeeded), hashes off the main thread (plugins/app/passwords.ts), writes the
// change and queues the emails it causes in one transaction (accounts/mail.ts). No Fastify
// here: the client comes in as plain facts, results and named errors (errors.ts) go out; the
// route signs in (the token, the device cookie) and answers.
import { randomUUID } from 'node:crypto'
import type { Kysely } from 'kysely'
import type { Client } from '../client-address.js'
import { consumeEmailToken, findUserForEmailToken, voidEmailTokens } from '../db/email-tokens.js'
import { linkedProviders, removeIdentitiesLinkedElsewhere } from '../db/identities.js'
import { recordSecurityEvent } from '../db/security-events.js'
import type { Database, UserRow } from '../db/types.js'
import {
  applyPendingEmail, createUserWithPreferences, findUserByEmail, isUniqueViolation, lockUser, markEmailVerified, normalizeEmail, resetPassword, updateUser
} from '../db/users.js'
import {
  CurrentPasswordRequiredError, DeviceLinkInvalidError, EmailAlreadyVerifiedError, EmailTakenError, InvalidCredentialsError, InvalidCurrentPasswordError,
  PasswordChangeConflictError, PasswordNotSetError, ResetTokenInvalidError, UnauthorizedError, VerificationTokenInvalidError
} from '../errors.js'
import { hashToken } from '../token-hash.js'
import { revokeKeysOnReset } from './api-keys.js'
import { recordedClient, type Attempt, type SignInLimits } from './limits.js'
import type { AccountEmail, AccountMail, ChangeWithMail } from './mail.js'
import { endSignIns, type Sessions } from './sessions.js'

/** A check that signed the user in: the route issues the token and sets the device cookie. */
export interface SignedIn {
  user: UserRow
  /** The `sign_in_device` cookie to set: this device may sign in while the account is locked. */
  deviceCookie: string
}

export interface ProfileChange {
  name?: string | null
  image?: string | null
  email?: string
  /** Needed for a new password and a new email. */
  currentPassword?: string
  newPassword?: string
}

export interface ProfileChanged {
  user: UserRow
  /** The address a change waits to have confirmed (its link went to it), or null. */
  pendingEmail: string | null
  /** Set when the current password was checked. */
  deviceCookie?: string
  /** Every older session has ended: the route signs in again. */
  passwordChanged: boolean
}

export interface Accounts {
  /** 409 EMAIL_TAKEN for a taken address; queues a welcome with the verification link. */
  register: (client: Client, account: { email: string, password: string, name?: string }) => Promise<SignedIn>
  /** 401 INVALID_CREDENTIALS for an unknown email or a wrong password, after the same work. */
  logIn: (client: Client, credentials: { email: string, password: string }) => Promise<SignedIn>
  /**
   * A partial update. A new password or email needs the current password (checked like a
   * sign-in); a new password voids older reset links and ends older sessions; a new email
   * waits for that address to confirm it (verifyEmail applies it), the current one told;
   * the current address again drops a waiting change; each change queues its notices.
   */
  changeProfile: (client: Client, user: UserRow, change: ProfileChange) => Promise<ProfileChanged>
  /** Resolves the same, after the same work, whether or not `email` has an account. */
  requestPasswordReset: (client: Client, email: string) => Promise<void>
  /**
   * 400 RESET_TOKEN_INVALID for a token that does not work; ends older sessions, verifies the
   * address, drops a waiting email change and the identities linked under another address.
   */
  resetPassword: (client: Client, reset: { token: string, password: string }) => Promise<SignedIn>
  /**
   * 400 VERIFICATION_TOKEN_INVALID for a token that does not work. A link to the address a
   * change waits for applies the change (409 EMAIL_TAKEN when another account took it
   * meanwhile) and removes the identities linked under another address.
   */
  verifyEmail: (client: Client, token: string) => Promise<UserRow>
  /** 409 EMAIL_ALREADY_VERIFIED; otherwise queues a fresh link unless the inbox had its mails this hour. */
  requestVerificationEmail: (client: Client, user: UserRow) => Promise<void>
  /** Resolves the same, after the same work, whether or not `email` has an account: its device link if it has. */
  requestDeviceLink: (client: Client, email: string) => Promise<void>
  /** 400 DEVICE_LINK_INVALID for a token that does not work; else the device cookie that lets this device past its account's lock. */
  trustDevice: (client: Client, token: string) => Promise<{ deviceCookie: string }>
}

/** How passwords are hashed and checked: the hashing pool of plugins/app/passwords.ts implements it. */
export interface Passwords {
  /** Throws BusyError (503) when the pool can take no more work: call it before any other
   * work of a request that will hash, so a shed request costs no database round trip. */
  admit: () => void
  hash: (password: string) => Promise<string>
  verify: (password: string, hash: string | undefined) => Promise<boolean>
}

export interface AccountDependencies {
  db: Kysely<Database>
  passwords: Passwords
  limits: SignInLimits
  mail: AccountMail
  sessions: Pick<Sessions, 'failedSignIn'>
}

/** Names trimmed, and blank ones none. */
const cleanName = (name: string | null | undefined): string | null => name?.trim() || null

/**
 * The account's address was just proved the owner's (a reset, a confirmed change): the
 * identities linked while it held another address go, each a security event. Their providers.
 */
async function unlinkedBy (tx: Kysely<Database>, userId: string, why: 'password-reset' | 'email-changed', client: Client): Promise<string[]> {
  const removed = await removeIdentitiesLinkedElsewhere(tx, userId)
  for (const provider of removed) await recordSecurityEvent(tx, { userId, type: 'identity-unlinked', method: why, provider, ...recordedClient(client) })
  return removed
}

export function accountService ({ db, passwords, limits, mail, sessions }: AccountDependencies): Accounts {
  /** A check that will hash: admitted by the limits, then by the hashing pool (503 when full), before any query. */
  const admitHashing = async (client: Client, account?: string): Promise<Attempt> => {
    const attempt = await limits.admit(client, account)
    passwords.admit()
    return attempt
  }

  return {
    async register (client, account) {
      const email = normalizeEmail(account.email)
      // Counted per client only: a taken address is no guess at its account's password.
      const attempt = await admitHashing(client)
      // Cheap early answer; the unique key below is what settles a race.
      if (await findUserByEmail(db, email)) throw await attempt.failed(new EmailTakenError())
      const passwordHash = await passwords.hash(account.password)
      let user
      try {
        user = await mail.transaction(async (tx) => {
          const created = await createUserWithPreferences(tx, { id: randomUUID(), name: cleanName(account.name), email, passwordHash })
          return { value: created, emails: [{ kind: 'welcome', user: created }] }
        })
      } catch (err) {
        if (isUniqueViolation(err)) throw await attempt.failed(new EmailTakenError())
        throw err
      }
      return { user, deviceCookie: await attempt.succeeded(user.email) }
    },

    async logIn (client, credentials) {
      const email = normalizeEmail(credentials.email)
      const attempt = await admitHashing(client, email)
      const user = await findUserByEmail(db, email)
      // Against a dummy hash when there is no such user, or no password (an account made through
      // a provider): every failure costs the same and reads the same.
      const matches = await passwords.verify(credentials.password, user?.password ?? undefined)
      if (!matches || user === undefined) {
        // Counted in the owner's security feed, in the background: the answer's time does not tell.
        if (user !== undefined) sessions.failedSignIn(user.id, client)
        throw await attempt.failed(new InvalidCredentialsError())
      }
      return { user, deviceCookie: await attempt.succeeded(email) }
    },

    async changeProfile (client, user, change) {
      const email = change.email === undefined ? undefined : normalizeEmail(change.email)
      const emailChanges = email !== undefined && email !== user.email
      // Before anything else, also before a taken address is a 409: a stolen token alone learns nothing.
      // An account without a password sets one through the reset flow first.
      if ((emailChanges || change.currentPassword !== undefined) && user.password === null) throw new PasswordNotSetError()
      if (emailChanges && change.currentPassword === undefined) throw new CurrentPasswordRequiredError()
      let attempt: Attempt | undefined
      let passwordHash: string | undefined
      if (change.currentPassword !== undefined) {
        // Guessing the current password with a stolen token costs what guessing at sign-in does.
        attempt = await admitHashing(client, user.email)
        if (!await passwords.verify(change.currentPassword, user.password ?? undefined)) throw await attempt.failed(new InvalidCurrentPasswordError())
        if (change.newPassword !== undefined) passwordHash = await passwords.hash(change.newPassword)
      }
      // A taken address is refused now, as at sign-up; its confirmation checks again.
      if (emailChanges && await findUserByEmail(db, email) !== undefined) throw new EmailTakenError()
      const updated = await mail.transaction(async (tx) => {
        const row = await updateUser(tx, user.id, {
          name: change.name === undefined ? undefined : cleanName(change.name),
          image: change.image,
          // The new address waits for its own confirmation; the current one again drops a waiting change.
          pendingEmail: email === undefined ? undefined : emailChanges ? email : null,
          // Only over the password that was checked: of two concurrent changes, one wins.
          passwordHash: passwordHash === undefined ? undefined : { from: user.password!, to: passwordHash }
        })
        const emails: AccountEmail[] = []
        if (row === undefined) return { value: undefined, emails }
        if (emailChanges) {
          // The link to the new address; the address that signs in today is told, and keeps signing in.
          emails.push({ kind: 'verification', user: { id: row.id, email } }, { kind: 'email-change-requested', user: row, newEmail: email })
          await recordSecurityEvent(tx, { userId: row.id, type: 'email-change-requested', ...recordedClient(client) })
        }
        if (passwordHash !== undefined) {
          // A reset link sent before the change must not undo it; every sign-in ends, those on their way too (the route signs in anew).
          await voidEmailTokens(tx, row.id, 'password_reset')
          await endSignIns(tx, row.id)
          await recordSecurityEvent(tx, { userId: row.id, type: 'password-changed', ...recordedClient(client) })
          emails.push({ kind: 'password-changed', user: row, providers: await linkedProviders(tx, row.id) })
        }
        return { value: row, emails }
      })
      // No row: the account is gone, or (with a new password) another change won.
      if (updated === undefined) throw passwordHash === undefined ? new UnauthorizedError() : new PasswordChangeConflictError()
      const { pending_email: pendingEmail, ...changed } = updated
      return {
        user: changed,
        pendingEmail,
        deviceCookie: attempt === undefined ? undefined : await attempt.succeeded(changed.email),
        passwordChanged: passwordHash !== undefined
      }
    },

    async requestPasswordReset (client, email) {
      const inbox = normalizeEmail(email)
      // Past the inbox's links for the hour: resolved the same, and nothing is sent.
      if (await limits.admitLinkRequest(client, inbox)) mail.resetLinkIfAccount(inbox)
    },

    async resetPassword (client, reset) {
      const hash = hashToken(reset.token)
      // Per client only: the account is not known before the token is checked.
      const attempt = await admitHashing(client)
      const invalid = () => attempt.failed(new ResetTokenInvalidError())
      // Checked before hashing (no hash for a bad token), and used up only in the transaction below.
      if (await findUserForEmailToken(db, hash, 'password_reset') === undefined) throw await invalid()
      const passwordHash = await passwords.hash(reset.password)
      const user = await mail.transaction(async (tx) => {
        const used = await consumeEmailToken(tx, hash, 'password_reset')
        if (used === undefined) return { value: undefined, emails: [] }
        const { userId } = used
        const updated = await resetPassword(tx, userId, passwordHash)
        await endSignIns(tx, userId)
        await recordSecurityEvent(tx, { userId, type: 'password-changed', method: 'password-reset', ...recordedClient(client) })
        // The reset proves this address is the owner's: a way in linked under another one may be whoever moved the account here.
        await unlinkedBy(tx, userId, 'password-reset', client)
        // So do its API keys: scripts get new ones from the owner (a password change keeps them).
        const keysRevoked = await revokeKeysOnReset(tx, client, updated)
        return { value: updated, emails: [{ kind: 'password-changed', user: updated, providers: await linkedProviders(tx, userId) }, ...keysRevoked] }
      })
      if (user === undefined) throw await invalid()
      return { user, deviceCookie: await attempt.succeeded(user.email) }
    },

    async verifyEmail (client, token) {
      const hash = hashToken(token)
      const attempt = await limits.admit(client)
      let taken = false
      let user: UserRow | undefined
      try {
        user = await mail.transaction(async (tx): Promise<ChangeWithMail<UserRow | undefined>> => {
          const used = await consumeEmailToken(tx, hash, 'email_verification')
          const current = used && await lockUser(tx, used.userId)
          if (used === undefined || current === undefined) return { value: undefined, emails: [] }
          const { pending_email: pendingEmail, ...row } = current
          if (used.email === row.email) return { value: await markEmailVerified(tx, row.id), emails: [] }
          // The link was checked against the row as it was; locked, the row may wait for another
          // address now (a change committed in between): this link confirms only its own.
          if (pendingEmail !== used.email) return { value: undefined, emails: [] }
          // The address a change waits for, confirmed by its inbox: unless another account took it meanwhile.
          if (await findUserByEmail(tx, used.email) !== undefined) {
            await updateUser(tx, row.id, { pendingEmail: null })
            taken = true
            return { value: undefined, emails: [] }
          }
          const changed = await applyPendingEmail(tx, row.id, used.email)
          if (changed === undefined) return { value: undefined, emails: [] }
          await recordSecurityEvent(tx, { userId: row.id, type: 'email-changed', ...recordedClient(client) })
          const removed = await unlinkedBy(tx, row.id, 'email-changed', client)
          return { value: changed, emails: [{ kind: 'email-changed', user: changed, oldEmail: row.email, removed }] }
        })
      } catch (err) {
        // Taken between the check and the change (the unique key settles it): nothing applied.
        if (isUniqueViolation(err)) throw new EmailTakenError()
        throw err
      }
      if (taken) throw new EmailTakenError()
      if (user === undefined) throw await attempt.failed(new VerificationTokenInvalidError())
      return user
    },

    async requestVerificationEmail (client, user) {
      if (user.email_verified !== null) throw new EmailAlreadyVerifiedError()
      // The inbox's cap is counted where the mail is queued (accounts/mail.ts).
      await limits.admitMailRequest(client)
      await mail.transaction(async () => ({ value: undefined, emails: [{ kind: 'verification', user }] }))
    },

    async requestDeviceLink (client, email) {
      const inbox = normalizeEmail(email)
      // Like "forgot": past the inbox's mails for the hour, resolved the same, and nothing is sent.
      if (await limits.admitLinkRequest(client, inbox)) mail.deviceLinkIfAccount(inbox)
    },

    async trustDevice (client, token) {
      const hash = hashToken(token)
      // Per client only, like the other links: a guessed token costs an attempt.
      const attempt = await limits.admit(client)
      const used = await db.transaction().execute(async (tx) => {
        const consumed = await consumeEmailToken(tx, hash, 'device_link')
        if (consumed !== undefined) await recordSecurityEvent(tx, { userId: consumed.userId, type: 'device-trusted', ...recordedClient(client) })
        return consumed
      })
      if (used === undefined) throw await attempt.failed(new DeviceLinkInvalidError())
      return { deviceCookie: limits.trustDevice(used.email) }
    }
  }
}
