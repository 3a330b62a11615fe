// The outbox sender: delivers the email rows that requests queued in their transactions
// (mail/outbox.ts). It claims one due row at a time under a lease that outlasts one bounded
// send (db/email.ts; several instances share the table without sending a row twice), sends
// it outside any transaction, then marks it sent or schedules a retry with exponential
// backoff, giving up EMAIL_GIVE_UP_MS after the message was queued (or at once on a
// permanent 5xx refusal). It runs every EMAIL_POLL_INTERVAL_MS, at once when a request has
// queued mail (wake()), and when the next waiting row falls due (a retry, or the lease of a
// sender that died).
// Transport: SMTP_URL through nodemailer; unset, outside production each message is logged
// (recipient, subject, link) instead, and in production messages stay queued until it is set.
import { randomInt } from 'node:crypto'
import fp from 'fastify-plugin'
import nodemailer from 'nodemailer'
import { Gauge } from 'prom-client'
import { claimDueEmails, countPendingEmails, markEmailFailed, markEmailSent, msUntilNextEmailDue, purgeEmailRecords, scheduleEmailRetry, type ClaimedEmail } from '../../db/email.js'
import { composeForSending, linkKeyFrom, type ComposedEmail, type OutboxContext } from '../../mail/outbox.js'
import { MAX_LOGGED_TEXT } from '../../server-options.js'

export interface Mailer {
  /** What messages are built with: the product name, APP_URL and the links' key. */
  context: OutboxContext
  /** Call after a commit that queued mail: the sender looks at the outbox now. */
  wake: () => void
  /**
   * Runs `work` (what queues mail, or would: the same work either way) without the request
   * waiting for it, so the answer cannot tell whether anything was queued; then wakes the
   * sender a random moment later (BACKGROUND_WAKE_MS). A failure is logged. Finished before
   * the database closes.
   */
  inBackground: (what: string, work: () => Promise<unknown>) => void
}

declare module 'fastify' {
  interface FastifyInstance {
    mail: Mailer
  }
}

// One send, whatever the server does (the timeouts below bound each step, not a server that
// trickles): then it is aborted and retried.
const SEND_TIMEOUT_MS = 40_000
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
const HOUSEKEEPING_INTERVAL_MS = 10 * 60_000
const SMTP_TIMEOUTS = { connectionTimeout: 10_000, greetingTimeout: 10_000, socketTimeout: 20_000, dnsTimeout: 10_000 }

/** The display name of EMAIL_FROM ("Task App <no-reply@…>"), or a neutral default. */
export function productName (from: string): string {
  const name = /^\s*"?([^"<]*?)"?\s*</.exec(from)?.[1]?.trim()
  return name || 'Task App'
}

const clip = (text: string): string => text.length <= MAX_LOGGED_TEXT ? text : `${text.slice(0, MAX_LOGGED_TEXT)}…`

/** A refusal the server means for good (5xx), as opposed to a network failure or a 4xx "try later". */
const isPermanent = (err: unknown): boolean => {
  const code = (err as { responseCode?: unknown }).responseCode
  return typeof code === 'number' && code >= 500 && code < 600
}

type Deliver = (email: ComposedEmail, signal: AbortSignal) => Promise<void>

export default fp(async function mailer (fastify) {
  const { config, db, log } = fastify
  const context: OutboxContext = { appUrl: config.APP_URL, product: productName(config.EMAIL_FROM), linkKey: linkKeyFrom(config.AUTH_JWT_SECRET) }

  // Read when scraped. A database that does not answer leaves the last value (and the
  // scrape succeeds): the database's own gauges tell that story.
  new Gauge({ // eslint-disable-line no-new
    name: 'email_outbox_depth',
    help: 'Emails waiting to be sent: queued or retrying, not yet sent nor given up (a growing value: the mail server is down or too slow)',
    registers: [fastify.metrics.registry],
    async collect () {
      try {
        this.set(await countPendingEmails(db))
      } catch (err) {
        log.debug({ err }, 'email_outbox_depth: the database did not answer')
      }
    }
  })

  let deliver: Deliver | undefined
  if (config.SMTP_URL !== undefined) {
    const transport = nodemailer.createTransport({ url: config.SMTP_URL, ...SMTP_TIMEOUTS })
    fastify.addHook('onClose', () => transport.close())
    deliver = async (email, signal) => {
      // An address object: nodemailer takes it as one mailbox, where a string would be parsed
      // as an address list ("a@x.com,b@y.com", "Name <a@x.com>").
      const to = { name: '', address: email.recipient }
      await transport.sendMail({ from: config.EMAIL_FROM, to, subject: email.subject, text: email.text, html: email.html, signal })
    }
  } else if (config.NODE_ENV !== 'production') {
    // The one place a link is logged: development, so a newcomer can follow it.
    deliver = async (email) => {
      log.info({ to: email.recipient, subject: email.subject, link: email.link ?? undefined }, 'email (SMTP_URL is not set: logged, not sent)')
    }
  } else {
    log.warn('SMTP_URL is not set: emails are queued and will be sent once it is')
  }

  let stopped = false
  let again = false
  let running: Promise<void> | undefined
  let timer: NodeJS.Timeout | undefined
  let lastHousekeeping = 0
  const shutdown = new AbortController()

  const sendOne = async (send: Deliver, email: ClaimedEmail) => {
    // Queued too long ago (mail was off, or the server was down): its links have expired.
    if (Date.now() - Date.parse(email.createdAt) >= config.EMAIL_GIVE_UP_MS) {
      await markEmailFailed(db, email.id, 'not sent within EMAIL_GIVE_UP_MS', true)
      log.error({ emailId: email.id, kind: email.kind, attempts: email.attempts }, 'email given up')
      return
    }
    const composed = await composeForSending(db, context, email)
    if (composed === undefined) {
      await markEmailFailed(db, email.id, 'not sent: its link no longer works (used, expired, superseded, or AUTH_JWT_SECRET changed)')
      log.warn({ emailId: email.id, kind: email.kind }, 'email dropped: its link no longer works')
      return
    }
    try {
      await send(composed, AbortSignal.any([shutdown.signal, AbortSignal.timeout(SEND_TIMEOUT_MS)]))
    } catch (err) {
      const error = clip(String((err as Error).message ?? err))
      if (shutdown.signal.aborted) {
        await scheduleEmailRetry(db, email.id, 0, 'interrupted by shutdown')
        log.info({ emailId: email.id, kind: email.kind }, 'email send interrupted by shutdown: left for the next sender')
        return
      }
      const age = Date.now() - Date.parse(email.createdAt)
      if (isPermanent(err) || age >= config.EMAIL_GIVE_UP_MS) {
        await markEmailFailed(db, email.id, error)
        log.error({ emailId: email.id, kind: email.kind, attempts: email.attempts, err }, 'email given up')
        return
      }
      const delay = Math.min(config.EMAIL_RETRY_BASE_MS * 2 ** Math.min(email.attempts - 1, 30), MAX_RETRY_DELAY_MS)
      await scheduleEmailRetry(db, email.id, delay, error)
      log.warn({ emailId: email.id, kind: email.kind, attempts: email.attempts, retryInMs: delay, err }, 'email not sent: will retry')
      return
    }
    await markEmailSent(db, email.id)
    log.info({ emailId: email.id, kind: email.kind, attempts: email.attempts }, 'email sent')
  }

  // One row per claim, so a lease only ever covers the send in progress.
  const deliverDue = async (send: Deliver) => {
    for (;;) {
      again = false
      const [email] = await claimDueEmails(db, 1, LEASE_MS)
      if (email === undefined) return
      await sendOne(send, email)
      if (stopped) return
    }
  }

  // Without a transport (production, no SMTP_URL) only the housekeeping runs. Returns when
  // the next pass is due: the poll interval, or sooner when a waiting row falls due.
  const pass = async (send: Deliver | undefined): Promise<number> => {
    if (send !== undefined) await deliverDue(send)
    if (Date.now() - lastHousekeeping >= HOUSEKEEPING_INTERVAL_MS) {
      lastHousekeeping = Date.now()
      await purgeEmailRecords(db)
    }
    if (send === undefined || stopped) return config.EMAIL_POLL_INTERVAL_MS
    const due = await msUntilNextEmailDue(db)
    return due === undefined ? config.EMAIL_POLL_INTERVAL_MS : Math.min(config.EMAIL_POLL_INTERVAL_MS, Math.max(MIN_WAIT_MS, due))
  }

  const run = (): void => {
    if (stopped) return
    if (running !== undefined) {
      again = true
      return
    }
    clearTimeout(timer)
    running = pass(deliver)
      .catch((err) => {
        log.error({ err }, 'email sender failed: trying again at the next interval')
        return config.EMAIL_POLL_INTERVAL_MS
      })
      .then((next) => {
        running = undefined
        if (stopped) return
        if (again) setImmediate(run)
        else timer = setTimeout(run, next).unref()
      })
  }

  const background = new Set<Promise<unknown>>()
  const inBackground = (what: string, work: () => Promise<unknown>) => {
    // Begun on a later turn of the event loop, after the answer is on its way: starting now
    // would put this work on the thread before the answer is written.
    const task = new Promise((resolve) => setImmediate(resolve))
      .then(work)
      .then(() => { setTimeout(run, randomInt(BACKGROUND_WAKE_MS.min, BACKGROUND_WAKE_MS.max)).unref() },
        (err) => { log.error({ err, what }, 'queueing an email failed') })
    background.add(task)
    task.finally(() => background.delete(task)).catch(() => {})
  }

  fastify.decorate('mail', { context, wake: run, inBackground } satisfies Mailer)
  // Requests still in flight at shutdown may queue more: onClose hooks run after them, and
  // this one (registered after the database's) before the database closes.
  fastify.addHook('onClose', async () => { await Promise.allSettled(background) })
  fastify.addHook('onReady', async () => { run() })
  // Before the database closes: no new pass; the one in flight may finish its send, then is
  // aborted (its message is retried by the next sender, here after a restart or elsewhere).
  fastify.addHook('preClose', async () => {
    await Promise.allSettled(background)
    stopped = true
    clearTimeout(timer)
    const inFlight = running
    if (inFlight === undefined) return
    let waited: NodeJS.Timeout | undefined
    await Promise.race([inFlight, new Promise((resolve) => { waited = setTimeout(resolve, CLOSE_WAIT_MS) })])
    clearTimeout(waited)
    shutdown.abort()
    await Promise.race([inFlight, new Promise((resolve) => { waited = setTimeout(resolve, CLOSE_WAIT_MS) })])
    clearTimeout(waited)
  })
}, { name: 'mailer', dependencies: ['db', 'metrics'] })
