// The one way to queue mail: the change and its messages commit together, and the sender is
// woken by the same call once they have (never before the commit, never forgotten after it).
import type { Kysely } from 'kysely'
import type { Database } from '../db/types.js'
import { Outbox, type OutboxContext } from './outbox.js'
import type { MailSender } from './sender.js'

/** What the queue needs of the sender (a test may count wakes instead). */
export type Waker = Pick<MailSender, 'wake' | 'inBackground'>

export class MailQueue<S extends Waker = MailSender> {
  /** What messages are built with: the product name, APP_URL and the links' key. */
  readonly context: OutboxContext
  /** The sender it wakes: `app.mail.sender.runOnce()` in a test sends what is due. */
  readonly sender: S
  readonly #db: Kysely<Database>

  constructor (db: Kysely<Database>, context: OutboxContext, sender: S) {
    this.#db = db
    this.context = context
    this.sender = sender
  }

  /**
   * Runs `work` in one transaction, with an outbox bound to it: messages queued there exist
   * exactly when the rest of the transaction does. After the commit the sender is woken if
   * anything was queued; a rollback (a thrown error, passed on) queues and wakes nothing.
   */
  async transaction<T> (work: (tx: Kysely<Database>, outbox: Outbox) => Promise<T>): Promise<T> {
    let outbox: Outbox | undefined
    const result = await this.#db.transaction().execute((tx) => {
      outbox = new Outbox(tx, this.context)
      return work(tx, outbox)
    })
    if (outbox !== undefined && outbox.queued > 0) this.sender.wake()
    return result
  }

  /**
   * Queues off the request ("forgot": the same work whether or not anything is queued, so the
   * answer cannot tell): `work` runs after the answer, on the database itself, and the sender
   * is woken a random moment later (mail/sender.ts). A failure is logged.
   */
  inBackground (what: string, work: (outbox: Outbox) => Promise<unknown>): void {
    this.sender.inBackground(what, () => work(new Outbox(this.#db, this.context)))
  }

  /** The sender looks at the outbox now (rows written by other means: tests, scripts). */
  wake (): void {
    this.sender.wake()
  }
}
