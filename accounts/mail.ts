// What the accounts service needs of mail, and the one adapter that gives it today (the
// outbox of mail/outbox.ts and the sender of plugins/app/mailer.ts). Every email an account
// change causes is queued through here, so changing how mail is queued or woken changes
// this file only.
import type { Kysely } from 'kysely'
import type { Database } from '../db/types.js'
import { queueEmailChanged, queuePasswordChanged, queuePasswordResetIfAccount, queueVerification, queueWelcome } from '../mail/outbox.js'
import type { Mailer } from '../plugins/app/mailer.js'

interface Recipient { id: string, email: string }

/** An email an account change causes; each goes to `user.email` but `email-changed`, which goes to the old address. */
export type AccountEmail =
  | { kind: 'welcome', user: Recipient }
  | { kind: 'verification', user: Recipient }
  | { kind: 'password-changed', user: Recipient }
  | { kind: 'email-changed', user: Recipient, oldEmail: string }

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

/** The mail of today: the outbox rows, then the sender's wake. */
export function outboxMail (db: Kysely<Database>, mailer: Pick<Mailer, 'context' | 'wake' | 'inBackground'>): AccountMail {
  const { context } = mailer
  const queue = (tx: Kysely<Database>, email: AccountEmail): Promise<void> => {
    switch (email.kind) {
      case 'welcome': return queueWelcome(tx, context, email.user)
      case 'verification': return queueVerification(tx, context, email.user)
      case 'password-changed': return queuePasswordChanged(tx, context, email.user)
      case 'email-changed': return queueEmailChanged(tx, context, email.user, email.oldEmail, email.user.email)
    }
  }
  return {
    async transaction (change) {
      const { value, emails } = await db.transaction().execute(async (tx) => {
        const done = await change(tx)
        for (const email of done.emails) await queue(tx, email)
        return done
      })
      if (emails.length > 0) mailer.wake()
      return value
    },
    resetLinkIfAccount (email) {
      mailer.inBackground('password reset', () => queuePasswordResetIfAccount(db, context, email))
    }
  }
}
