// Mail for this app: the queue the routes use (mail/queue.ts: commit and wake in one call),
// the sender (mail/sender.ts) and the purges of old mail records, run by the scheduler
// (plugins/app/scheduler.ts). Transport: SMTP_URL through nodemailer; unset, outside
// production each message is logged (recipient, subject, link) instead, and in production
// messages stay queued until it is set.
import fp from 'fastify-plugin'
import { countPendingEmails, purgeOldEmails } from '../../db/email-outbox.js'
import { purgeExpiredEmailTokens } from '../../db/email-tokens.js'
import { linkKeyFrom, type OutboxContext } from '../../mail/outbox.js'
import { MailQueue } from '../../mail/queue.js'
import { MailSender, type Deliver } from '../../mail/sender.js'
import { logTransport, smtpTransport } from '../../mail/transports.js'
import { MAX_LOGGED_TEXT } from '../../errors.js'

declare module 'fastify' {
  interface FastifyInstance {
    mail: MailQueue
  }
}

/** How often expired tokens and old outbox rows are deleted. */
const PURGE_INTERVAL_MS = 10 * 60_000

/** The display name of EMAIL_FROM ("Task App <no-reply@…>"), or a neutral default. */
export function productName (from: string): string {
  const name = /^\s*"?([^"<]*?)"?\s*</.exec(from)?.[1]?.trim()
  return name || 'Task App'
}

export default fp(async function mailer (fastify) {
  const { config, db, log } = fastify
  const context: OutboxContext = {
    appUrl: config.http.appUrl,
    product: productName(config.email.from),
    linkKey: linkKeyFrom(config.auth.jwtSecret),
    providerNames: new Map(config.identityProviders.map(({ id, name }) => [id, name]))
  }

  // A database that does not answer leaves the last value: its own gauges tell that story.
  fastify.metrics.gauge({
    name: 'email_outbox_depth',
    help: 'Emails waiting to be sent: queued or retrying, not yet sent nor given up (a growing value: the mail server is down or too slow)',
    read: () => countPendingEmails(db)
  })

  let deliver: Deliver | undefined
  if (config.email.smtpUrl !== undefined) {
    const smtp = smtpTransport(config.email.smtpUrl, config.email.from)
    fastify.addHook('onClose', () => smtp.close())
    deliver = smtp.deliver
  } else if (!config.production) {
    deliver = logTransport(log)
  } else {
    log.warn('SMTP_URL is not set: emails are queued and will be sent once it is')
  }

  const sender = new MailSender({
    db,
    context,
    deliver,
    log,
    pollIntervalMs: config.email.pollIntervalMs,
    retryBaseMs: config.email.retryBaseMs,
    giveUpMs: config.email.giveUpMs,
    maxErrorLength: MAX_LOGGED_TEXT
  })
  fastify.jobs.add(sender)
  fastify.jobs.every('mail.purge-tokens', PURGE_INTERVAL_MS, () => purgeExpiredEmailTokens(db))
  fastify.jobs.every('mail.purge-outbox', PURGE_INTERVAL_MS, () => purgeOldEmails(db))
  fastify.decorate('mail', new MailQueue(db, context, sender))
  // Requests still in flight when the jobs stop may queue more in the background: onClose
  // hooks run after them, and this one (registered after the database's) before it closes.
  fastify.addHook('onClose', () => sender.backgroundDone())
}, { name: 'mailer', dependencies: ['db', 'metrics', 'scheduler'] })
