// How a composed message leaves: over SMTP (nodemailer), or into the log in development.
// The sender (mail/sender.ts) knows only the Deliver function; no nodemailer type beyond here.
import type { Transporter } from 'nodemailer'
import type { Logger } from '../jobs/scheduler.js'
import type { Deliver } from './sender.js'

const SMTP_TIMEOUTS = { connectionTimeout: 10_000, greetingTimeout: 10_000, socketTimeout: 20_000, dnsTimeout: 10_000 }

export interface Transport {
  deliver: Deliver
  close: () => void
}

/**
 * SMTP_URL through nodemailer; connection, greeting and socket timeouts of 10, 10 and 20 s.
 * nodemailer is loaded by the first message, not at start-up (issue 34).
 */
export function smtpTransport (url: string, from: string): Transport {
  let transport: Promise<Transporter> | undefined
  let closed = false
  const open = () => (transport ??= import('nodemailer').then(({ default: nodemailer }) => nodemailer.createTransport({ url, ...SMTP_TIMEOUTS })))
  return {
    async deliver (email, signal) {
      // An address object: nodemailer takes it as one mailbox, where a string would be parsed
      // as an address list ("a@x.com,b@y.com", "Name <a@x.com>").
      const to = { name: '', address: email.recipient }
      const smtp = await open()
      // Closed while it loaded: no new connection is opened.
      if (closed) throw new Error('the mail transport is closed')
      await smtp.sendMail({ from, to, subject: email.subject, text: email.text, html: email.html, signal })
    },
    close: () => {
      closed = true
      transport?.then((smtp) => { smtp.close() }, () => {})
    }
  }
}

/** Development without SMTP_URL: the one place a link is logged, so a newcomer can follow it. */
export const logTransport = (log: Logger): Deliver => async (email) => {
  log.info({ to: email.recipient, subject: email.subject, link: email.link ?? undefined }, 'email (SMTP_URL is not set: logged, not sent)')
  return 'logged'
}
