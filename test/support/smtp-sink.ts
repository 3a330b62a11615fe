// A real SMTP server for the tests (nodemailer's smtp-server on 127.0.0.1), keeping what
// arrives parsed by mailparser: tests read what actually crossed an SMTP connection. Also the
// mail catcher of npm run mail:dev (scripts/mail-dev.ts).
import { once } from 'node:events'
import { simpleParser, type ParsedMail } from 'mailparser'
import { SMTPServer } from 'smtp-server'

export interface ReceivedMail {
  to: string
  /** The envelope's recipients (RCPT TO), where the message was actually delivered. */
  envelope: string[]
  from: string
  subject: string
  text: string
  html: string
  /** The token of the message's reset or verification link, if any. */
  token: string | undefined
  link: string | undefined
  /** Every http(s) link of the message, text and HTML, each once. */
  links: string[]
  parsed: ParsedMail
}

export interface SmtpSink {
  url: string
  port: number
  received: ReceivedMail[]
  /** Resolves with the first message (already here or yet to come) that matches. */
  waitFor: (match: (mail: ReceivedMail) => boolean, timeoutMs?: number) => Promise<ReceivedMail>
  /** Holds every message's final answer until release() (to catch a delivery in flight). */
  hold: () => void
  /** Answers the held messages with OK, or (drop) with a failure: the sender never learns they arrived. */
  release: (drop?: boolean) => void
  /** Called when a message's data has arrived (held or not). */
  onData: (listener: () => void) => void
  /** Called with each message as it is accepted. */
  onMail: (listener: (mail: ReceivedMail) => void) => void
  close: () => Promise<void>
}

const LINK = /https?:\/\/\S+\?token=([\w-]+)/
const TEXT_LINKS = /https?:\/\/[^\s<>"']+/g
const HREFS = /href="(https?:\/\/[^"]+)"/g

function linksOf (text: string, html: string): string[] {
  const links = [...text.matchAll(TEXT_LINKS)].map((m) => m[0])
  for (const m of html.matchAll(HREFS)) links.push(m[1]!.replaceAll('&amp;', '&'))
  return [...new Set(links)]
}

/** `rejectRecipients`: addresses refused for good (550), as a server refuses an unknown mailbox. */
export async function startSmtpSink (port = 0, options: { rejectRecipients?: RegExp } = {}): Promise<SmtpSink> {
  const received: ReceivedMail[] = []
  const waiters: Array<{ match: (mail: ReceivedMail) => boolean, resolve: (mail: ReceivedMail) => void }> = []
  const dataListeners: Array<() => void> = []
  const mailListeners: Array<(mail: ReceivedMail) => void> = []
  let held: Array<(drop?: boolean) => void> | undefined
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS'],
    logger: false,
    onRcptTo (address, _session, callback) {
      if (options.rejectRecipients?.test(address.address)) {
        callback(Object.assign(new Error('No such mailbox'), { responseCode: 550 }))
        return
      }
      callback()
    },
    onData (stream, session, callback) {
      simpleParser(stream).then((parsed) => {
        for (const listener of dataListeners) listener()
        const accept = (drop = false) => {
          if (drop) {
            callback(new Error('dropped by the test'))
            return
          }
          const text = parsed.text ?? ''
          const html = typeof parsed.html === 'string' ? parsed.html : ''
          const match = LINK.exec(text)
          const mail: ReceivedMail = {
            to: Array.isArray(parsed.to) ? parsed.to.map((a) => a.text).join(', ') : parsed.to?.text ?? '',
            envelope: session.envelope.rcptTo.map((a) => a.address),
            from: parsed.from?.text ?? '',
            subject: parsed.subject ?? '',
            text,
            html,
            token: match?.[1],
            link: match?.[0],
            links: linksOf(text, html),
            parsed
          }
          received.push(mail)
          callback()
          for (const listener of mailListeners) listener(mail)
          for (const waiter of [...waiters]) {
            if (waiter.match(mail)) {
              waiters.splice(waiters.indexOf(waiter), 1)
              waiter.resolve(mail)
            }
          }
        }
        if (held === undefined) accept()
        else held.push(accept)
      }, (err) => callback(err as Error))
    }
  })
  // A client that vanishes mid-conversation (a service the test killed while its pooled SMTP
  // connection was open) resets its socket; smtp-server re-emits that on the server, where an
  // unheard 'error' would crash the test process after every assertion had passed.
  server.on('error', () => {})
  server.listen(port, '127.0.0.1')
  await once(server.server, 'listening')
  const bound = (server.server.address() as { port: number }).port
  return {
    url: `smtp://127.0.0.1:${bound}`,
    port: bound,
    received,
    waitFor (match, timeoutMs = 30_000) {
      const already = received.find(match)
      if (already) return Promise.resolve(already)
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no matching email within ${timeoutMs} ms; received: ${received.map((m) => `${m.to}: ${m.subject}`).join('; ')}`)), timeoutMs)
        waiters.push({ match, resolve: (mail) => { clearTimeout(timer); resolve(mail) } })
      })
    },
    hold () { held ??= [] },
    release (drop = false) {
      const waiting = held ?? []
      held = undefined
      for (const accept of waiting) accept(drop)
    },
    onData (listener) { dataListeners.push(listener) },
    onMail (listener) { mailListeners.push(listener) },
    close: () => new Promise<void>((resolve) => server.close(() => resolve()))
  }
}
