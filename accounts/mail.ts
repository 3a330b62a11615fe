// What the accounts service needs of mail, and the one adapter that gives it today (the
// queue of mail/queue.ts: the outbox and the sender's wake in one call). Every email an account
// change causes is queued through here, so changing how mail is queued or woken changes
// this file only. Here too the inbox's hourly cap (accounts/limits.ts, admitInbox) meets every
// such email: past it a link is not sent, and a notice waits to go out with the others held
// for that address in one digest when the hour ends, so the owner still learns what happened.
import type { Kysely } from 'kysely'
import type { Database } from '../db/types.js'
import type { ApiKeyEvent, SecondFactorEvent } from '../mail/messages.js'
import type { Outbox } from '../mail/outbox.js'
import type { MailQueue, Waker } from '../mail/queue.js'
import type { InboxAdmission } from './limits.js'

interface Recipient { id: string, email: string }

/**
 * An email an account change causes; each goes to `user.email` but `email-changed`, which goes
 * to the old address. `verification` of an address a change waits for: `user.email` is that address.
 */
export type AccountEmail =
  | { kind: 'welcome', user: Recipient }
  | { kind: 'verification', user: Recipient }
  /** `providers`: the ids of the identity providers still linked, named in the notice. */
  | { kind: 'password-changed', user: Recipient, providers: string[] }
  /** Once the new address confirmed it; `removed`: the providers unlinked by the change. */
  | { kind: 'email-changed', user: Recipient, oldEmail: string, removed: string[] }
  /** To the current address: a change to `newEmail` waits for that address to confirm it. */
  | { kind: 'email-change-requested', user: Recipient, newEmail: string }
  | { kind: 'welcome-verified', user: Recipient, provider: string }
  | { kind: 'sign-in-method', user: Recipient, change: 'added' | 'removed', what: string }
  /** `recoveryCodesLeft` for `recovery-code-used`. */
  | { kind: 'second-factor', user: Recipient, event: SecondFactorEvent, recoveryCodesLeft?: number }
  /** The key by its name and prefix; `count` for `revoked-by-reset`. */
  | { kind: 'api-key', user: Recipient, event: ApiKeyEvent, name: string, prefix: string, count?: number }

/** What a change made in a transaction returns: its value, and the emails it causes. */
export interface ChangeWithMail<T> { value: T, emails: AccountEmail[] }

export interface AccountMail {
  /**
   * Runs `change` in one transaction and queues the emails it returns in that same
   * transaction, so they exist exactly when the change does (each counted against its
   * inbox's cap); once it has committed, wakes the sender when any were queued.
   */
  transaction: <T>(change: (tx: Kysely<Database>) => Promise<ChangeWithMail<T>>) => Promise<T>
  /**
   * "Forgot password": a reset link to `email` if it is an account's address, queued after
   * the answer with the same work whether or not it is, so neither the answer nor its timing
   * tells. The caller counted it against the inbox (admitLinkRequest).
   */
  resetLinkIfAccount: (email: string) => void
  /** The device link of a locked account (POST /auth/device-link), queued like resetLinkIfAccount. */
  deviceLinkIfAccount: (email: string) => void
}

/** One more mail to an address this hour: accounts/limits.ts's admitInbox. */
export type InboxCap = (address: string) => Promise<InboxAdmission>

const recipientOf = (email: AccountEmail): string => email.kind === 'email-changed' ? email.oldEmail : email.user.email
const carriesLink = (email: AccountEmail): boolean => email.kind === 'welcome' || email.kind === 'verification'

/** The mail of today: the outbox rows in the change's transaction, then the sender's wake. */
export function outboxMail (mail: MailQueue<Waker>, inbox: InboxCap): AccountMail {
  const queue = (outbox: Outbox, email: AccountEmail, heldForMs?: number): Promise<void> => {
    switch (email.kind) {
      case 'welcome': return outbox.welcome(email.user)
      case 'verification': return outbox.verification(email.user)
      case 'password-changed': return outbox.passwordChanged(email.user, email.providers, heldForMs)
      case 'email-changed': return outbox.emailChanged(email.user, email.oldEmail, email.user.email, email.removed, heldForMs)
      case 'email-change-requested': return outbox.emailChangeRequested(email.user, email.newEmail, heldForMs)
      case 'welcome-verified': return outbox.welcomeVerified(email.user, email.provider, heldForMs)
      case 'sign-in-method': return outbox.signInMethod(email.user, email.change, email.what, heldForMs)
      case 'second-factor': return outbox.secondFactor(email.user, email.event, email.recoveryCodesLeft, heldForMs)
      case 'api-key': return outbox.apiKey(email.user, email.event, email, email.count, heldForMs)
    }
  }
  return {
    transaction: (change) => mail.transaction(async (tx, outbox) => {
      const { value, emails } = await change(tx)
      for (const email of emails) {
        const { allowed, windowEndsInMs } = await inbox(recipientOf(email))
        if (allowed) await queue(outbox, email)
        // Past the cap a link is not sent (a later request can ask again); a notice is held.
        else if (!carriesLink(email)) await queue(outbox, email, windowEndsInMs)
      }
      return value
    }),
    resetLinkIfAccount (email) {
      mail.inBackground('password reset', (outbox) => outbox.passwordResetIfAccount(email))
    },
    deviceLinkIfAccount (email) {
      mail.inBackground('device link', (outbox) => outbox.deviceLinkIfAccount(email))
    }
  }
}
