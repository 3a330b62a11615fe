// The outbox sender: delivers the email rows that requests queued in their transactions
// (mail/queue.ts). It claims one due row at a time under a lease that outlasts one bounded
// send (db/email-outbox.ts; several instances share the table without sending a row twice),
// sends it outside any transaction, then marks it sent or schedules a retry with exponential
// backoff, giving up `giveUpMs` after the message was queued (or at once on a permanent 5xx
// refusal). Started, it runs every `pollIntervalMs`, when woken (a commit that queued mail),
// and when the next waiting row falls due (a retry, or the lease of a sender that died).
// No Fastify inside: the transport is a function, and a test calls runOnce() to send what is due.
import { randomInt } from 'node:crypto'
import type { Kysely } from 'kysely'
import { claimDueEmails, claimHeldWith, markEmailFailed, markEmailSent, msUntilNextEmailDue, scheduleEmailRetry, type ClaimedEmail } from '../db/email-outbox.js'
import type { Database } from '../db/types.js'
import { PeriodicJob, type BackgroundJob, type Logger, type PassSignals } from '../jobs/scheduler.js'
import { composeForSending, type ComposedEmail, type OutboxContext } from './outbox.js'

/**
 * Hands one message to the mail server (or the log); rejects when it was not accepted.
 * Resolves 'logged' when it only went into the log (development without SMTP_URL).
 */
export type Deliver = (email: ComposedEmail, signal: AbortSignal) => Promise<void | 'logged'>

export interface MailSenderOptions {
  db: Kysely<Database>
  context: OutboxContext
  /** Undefined: nothing is sent, and messages stay queued (production without SMTP_URL). */
  deliver: Deliver | undefined
  log: Logger
  /** EMAIL_POLL_INTERVAL_MS, EMAIL_RETRY_BASE_MS, EMAIL_GIVE_UP_MS. */
  pollIntervalMs: number
  retryBaseMs: number
  giveUpMs: number
  /** Text kept of an error (MAX_LOGGED_TEXT). */
  maxErrorLength?: number
}

// One send, whatever the server does (the transport's timeouts bound each step, not a server
// that trickles): then it is aborted and retried.
export const SEND_TIMEOUT_MS = 40_000
// A row is claimed for one send and the record of its outcome. A sender killed mid-send
// leaves its row to any sender, a restarted one included, when this ends: the message is
// sent again within a minute (at least once; docs/email.md).
const LEASE_MS = SEND_TIMEOUT_MS + 10_000
// After background queueing (forgot), the sender looks this long later, at random: whether
// there was a message to send then shows neither in the answer nor in the requests right
// after it, and the moment it is sent is not tied to the request (docs/email.md).
const BACKGROUND_WAKE_MS = { min: 200, max: 1_000 }
// A row due now but not taken (another sender's claim in progress) is looked at again after this.
const MIN_WAIT_MS = 1_000
const MAX_RETRY_DELAY_MS = 60 * 60_000
// On shutdown an in-flight send gets this long to finish before it is aborted (and retried).
const CLOSE_WAIT_MS = 3_000

/** A refusal the server means for good (5xx), as opposed to a network failure or a 4xx "try later". */
const isPermanent = (err: unknown): boolean => {
  const code = (err as { responseCode?: unknown }).responseCode
  return typeof code === 'number' && code >= 500 && code < 600
}

export class MailSender implements BackgroundJob {
  readonly name = 'mail.send'
  readonly #options: MailSenderOptions
  readonly #job: PeriodicJob
  readonly #background = new Set<Promise<unknown>>()

  constructor (options: MailSenderOptions) {
    this.#options = options
    this.#job = new PeriodicJob({
      name: this.name,
      intervalMs: options.pollIntervalMs,
      log: options.log,
      stopGraceMs: CLOSE_WAIT_MS,
      run: (signals) => this.#pass(signals)
    })
  }

  start (): void { this.#job.start() }
  wake (delayMs?: number): void { this.#job.wake(delayMs) }
  /** Sends every message due now, one after another; resolves when none is left. */
  runOnce (): Promise<void> { return this.#job.runOnce() }

  /**
   * Work that queues mail, or would (the same work either way), run without the request
   * waiting for it: on a later turn of the event loop, after the answer is on its way; then
   * the sender is woken a random moment later. A failure is logged. stop() waits for it.
   */
  inBackground (what: string, work: () => Promise<unknown>): void {
    const task = new Promise((resolve) => setImmediate(resolve))
      .then(work)
      .then(() => { this.wake(randomInt(BACKGROUND_WAKE_MS.min, BACKGROUND_WAKE_MS.max)) },
        (err: unknown) => { this.#options.log.error({ err, what }, 'queueing an email failed') })
    this.#background.add(task)
    task.finally(() => this.#background.delete(task)).catch(() => {})
  }

  /**
   * Waits for background queueing, then no new pass: the one in flight may finish its send,
   * then is aborted (its message is retried by the next sender, after a restart or elsewhere).
   */
  async stop (): Promise<void> {
    await this.backgroundDone()
    await this.#job.stop()
  }

  /** Background queueing begun so far has finished (stopped or not: it needs only the database). */
  async backgroundDone (): Promise<void> {
    await Promise.allSettled(this.#background)
  }

  // Returns when the next pass is due: the poll interval, or sooner when a waiting row falls due.
  async #pass (signals: PassSignals): Promise<number> {
    const { db, deliver, pollIntervalMs } = this.#options
    if (deliver === undefined) return pollIntervalMs
    // One row per claim, so a lease only ever covers the send in progress.
    for (;;) {
      const [email] = await claimDueEmails(db, 1, LEASE_MS)
      if (email === undefined) break
      // A held notice goes out with the others held for its address: one digest, one send.
      const heldWithIt = email.digest ? await claimHeldWith(db, email, LEASE_MS) : []
      await this.#sendOne(deliver, email, heldWithIt, signals.abort)
      if (signals.stopping.aborted) return pollIntervalMs
    }
    const due = await msUntilNextEmailDue(db)
    return due === undefined ? pollIntervalMs : Math.min(pollIntervalMs, Math.max(MIN_WAIT_MS, due))
  }

  /** Sends `email` (with the held notices claimed with it, as one digest) and records the outcome on each of their rows. */
  async #sendOne (deliver: Deliver, email: ClaimedEmail, heldWithIt: ClaimedEmail[], shutdown: AbortSignal): Promise<void> {
    const { context, log, giveUpMs, retryBaseMs } = this.#options
    const rows = [email, ...heldWithIt]
    const outcome = {
      failed: (error: string, ifNoneBefore?: boolean) => Promise.all(rows.map((row) => markEmailFailed(this.#options.db, row.id, error, ifNoneBefore))),
      retry: (delayMs: number, error: string) => Promise.all(rows.map((row) => scheduleEmailRetry(this.#options.db, row.id, delayMs, error))),
      sent: () => Promise.all(rows.map((row) => markEmailSent(this.#options.db, row.id)))
    }
    // Queued too long ago (mail was off, or the server was down): its links have expired.
    if (Date.now() - Date.parse(email.createdAt) >= giveUpMs) {
      await outcome.failed('not sent within EMAIL_GIVE_UP_MS', true)
      log.error({ emailId: email.id, kind: email.kind, attempts: email.attempts }, 'email given up')
      return
    }
    const composed = await composeForSending(this.#options.db, context, email, heldWithIt)
    if (composed === undefined) {
      await outcome.failed('not sent: its link no longer works (used, expired, superseded, or AUTH_JWT_SECRET changed)')
      log.warn({ emailId: email.id, kind: email.kind }, 'email dropped: its link no longer works')
      return
    }
    let delivered: void | 'logged'
    try {
      delivered = await deliver(composed, AbortSignal.any([shutdown, AbortSignal.timeout(SEND_TIMEOUT_MS)]))
    } catch (err) {
      const error = this.#clip(String((err as Error).message ?? err))
      if (shutdown.aborted) {
        await outcome.retry(0, 'interrupted by shutdown')
        log.info({ emailId: email.id, kind: email.kind }, 'email send interrupted by shutdown: left for the next sender')
        return
      }
      const age = Date.now() - Date.parse(email.createdAt)
      if (isPermanent(err) || age >= giveUpMs) {
        await outcome.failed(error)
        log.error({ emailId: email.id, kind: email.kind, attempts: email.attempts, err }, 'email given up')
        return
      }
      const delay = Math.min(retryBaseMs * 2 ** Math.min(email.attempts - 1, 30), MAX_RETRY_DELAY_MS)
      await outcome.retry(delay, error)
      log.warn({ emailId: email.id, kind: email.kind, attempts: email.attempts, retryInMs: delay, err }, 'email not sent: will retry')
      return
    }
    // Done with either way; the log says which, after the transport's line with the link.
    await outcome.sent()
    log.info({ emailId: email.id, kind: email.digest ? 'security_digest' : email.kind, attempts: email.attempts, ...(email.digest && { notices: rows.length }) }, delivered === 'logged' ? 'email logged, not sent (SMTP_URL is not set)' : 'email sent')
  }

  #clip (text: string): string {
    const max = this.#options.maxErrorLength ?? 2_000
    return text.length <= max ? text : `${text.slice(0, max)}…`
  }
}
