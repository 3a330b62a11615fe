// What the accounts service needs of mail, and the one adapter that gives it today (the
// queue of mail/queue.ts: the outbox and the sender's wake in one call). Every email an account
// change causes is queued through here, so changing how mail is queued or woken changes
// this file only.
import type { Kysely } from 'kysely'
import type { Database } from '../db/types.js'
import type { Outbox } from '../mail/outbox.js'
import type { MailQueue, Waker } from '../mail/queue.js'

interface Recipient { id: string, email: string }

/** An email an account change causes; each goes to `user.email` but `email-changed`, which goes to the old address. */
export type AccountEmail =
  | { kind: 'welcome', user: Recipient }
  | { kind: 'verification', user: Recipient }
  | { kind: 'password-changed', user: Recipient }
  | { kind: 'email-changed', user: Recipient, oldEmail: string }
  | { kind: 'welcome-verified', user: Recipient, provider: string }
  | { kind: 'sign-in-method', user: Recipient, change: 'added' | 'removed', what: string }

/** What a change made in a transaction returns: its value, and the emails it causes. */
export interface ChangeWithMail<T> { value: T, emails: AccountEmail[] }

export interface AccountMail {
  /**
   * Runs `change` in one transaction and queues the emails it returns in that same
   * transaction, so they exist exactly when the change does; once it has committed, wakes
   * the sender when any were queued.
   */
  transaction: <T>(change: (tx: Kysely<Database>) => Promise<ChangeWithMail<T>>) => Promise<T>
  /**
   * "Forgot password": a reset link to `email` if it is an account's address, queued after
   * the answer with the same work whether or not it is, so neither the answer nor its timing
   * tells.
   */
  resetLinkIfAccount: (email: string) => void
}

/** The mail of today: the outbox rows in the change's transaction, then the sender's wake. */
export function outboxMail (mail: MailQueue<Waker>): AccountMail {
  const queue = (outbox: Outbox, email: AccountEmail): Promise<void> => {
    switch (email.kind) {
      case 'welcome': return outbox.welcome(email.user)
      case 'verification': return outbox.verification(email.user)
      case 'password-changed': return outbox.passwordChanged(email.user)
      case 'email-changed': return outbox.emailChanged(email.user, email.oldEmail, email.user.email)
      case 'welcome-verified': return outbox.welcomeVerified(email.user, email.provider)
      case 'sign-in-method': return outbox.signInMethod(email.user, email.change, email.what)
    }
  }
  return {
    transaction: (change) => mail.transaction(async (tx, outbox) => {
      const { value, emails } = await change(tx)
      for (const email of emails) await queue(outbox, email)
      return value
    }),
    resetLinkIfAccount (email) {
      mail.inBackground('password reset', (outbox) => outbox.passwordResetIfAccount(email))
    }
  }
}
