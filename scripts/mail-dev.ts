// npm run mail:dev: the project's SMTP sink (test/support/smtp-sink.ts, the one the tests use) on a
// port, a log line per message (recipient, subject, links) and a page listing them. Mail on one
// machine, no provider, nothing installed: docs/email.md, "Trying it locally".
//
//   npm run mail:dev [-- --smtp-port 1025 --http-port 1080]
import { once } from 'node:events'
import { createServer } from 'node:http'
import { parseArgs } from 'node:util'
import { startSmtpSink, type ReceivedMail } from '../test/support/smtp-sink.js'

const { values } = parseArgs({
  options: {
    'smtp-port': { type: 'string', default: '1025' },
    'http-port': { type: 'string', default: '1080' }
  }
})
const port = (name: 'smtp-port' | 'http-port') => {
  const value = Number(values[name])
  if (!Number.isInteger(value) || value < 0 || value > 65_535) throw new Error(`--${name}: not a port: ${values[name]}`)
  return value
}

const messages: Array<{ at: Date, mail: ReceivedMail }> = []
const sink = await startSmtpSink(port('smtp-port'))
sink.onMail((mail) => {
  messages.push({ at: new Date(), mail })
  console.log(`mail to=${mail.to} subject=${JSON.stringify(mail.subject)} links=${mail.links.join(' ') || 'none'}`)
})

const HTML_ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }
const esc = (value: unknown) => String(value ?? '').replace(/[&<>"']/g, (c) => HTML_ESCAPES[c]!)
const linkList = (links: string[]) => links.map((link) => `<a href="${esc(link)}">${esc(link)}</a>`).join('<br>')
const page = (title: string, body: string, head = '') => `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${esc(title)} · mail:dev</title>${head}
<style>body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}table{border-collapse:collapse;width:100%}
td,th{border-bottom:1px solid #ddd;padding:.3rem .5rem;text-align:left;vertical-align:top;word-break:break-all}pre{white-space:pre-wrap}
iframe{width:100%;height:30rem;border:1px solid #ddd}</style></head><body><h1>${esc(title)}</h1>${body}</body></html>`

function listPage (): string {
  const rows = messages.map(({ at, mail }, i) => ({ at, mail, i })).reverse().map(({ at, mail, i }) =>
    `<tr class="message"><td>${esc(at.toISOString().slice(11, 19))}</td><td class="to">${esc(mail.to)}</td>` +
    `<td class="subject"><a href="/messages/${i}">${esc(mail.subject)}</a></td><td class="links">${linkList(mail.links)}</td></tr>`).join('')
  const body = `<p>SMTP on <code>${esc(sink.url)}</code>: ${messages.length} message${messages.length === 1 ? '' : 's'}, newest first (this page reloads every 5 s).</p>` +
    `<table><tr><th>Received</th><th>To</th><th>Subject</th><th>Links</th></tr>${rows}</table>`
  return page('Mail', body, '<meta http-equiv="refresh" content="5">')
}

function messagePage (i: number, mail: ReceivedMail): string {
  const html = mail.html === '' ? '' : `<h2>HTML</h2><iframe sandbox src="/messages/${i}/html"></iframe>`
  return page(mail.subject, `<p><a href="/">All messages</a></p><table><tr><th>From</th><td>${esc(mail.from)}</td></tr>` +
    `<tr><th>To</th><td>${esc(mail.to)}</td></tr><tr><th>Links</th><td>${linkList(mail.links)}</td></tr></table>` +
    `<h2>Text</h2><pre>${esc(mail.text)}</pre>${html}`)
}

const web = createServer((req, res) => {
  const path = new URL(req.url ?? '/', 'http://mail-dev.invalid').pathname
  const match = /^\/messages\/(\d+)(\/html)?$/.exec(path)
  const message = match ? messages[Number(match[1])] : undefined
  const answer = (status: number, body: string, headers: Record<string, string> = {}) => {
    res.writeHead(status, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store', ...headers })
    res.end(body)
  }
  if (path === '/') answer(200, listPage())
  // The message's own HTML, as a mail client shows it: no scripts, nothing fetched but its images.
  else if (message && match?.[2]) answer(200, message.mail.html, { 'content-security-policy': "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data: http: https:" })
  else if (message) answer(200, messagePage(Number(match![1]), message.mail))
  else answer(404, page('Not found', '<p><a href="/">All messages</a></p>'))
})
web.listen(port('http-port'), '127.0.0.1')
await once(web, 'listening')
const { port: httpPort } = web.address() as { port: number }

console.log(`Mail sink: SMTP on ${sink.url}, the messages at http://127.0.0.1:${httpPort}/
Put this in .env (or the environment) and restart the service:

SMTP_URL=${sink.url}
`)

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    web.close()
    web.closeAllConnections()
    sink.close().then(() => process.exit(0), () => process.exit(1))
  })
}
