// npm run mail:dev with the service, as docs/email.md tells a newcomer to see the mails: the
// SMTP_URL it prints given to the app, a sign-up's welcome mail in its log and on its page.
import t from 'tap'
import { build, registerUser, uniqueEmail } from '../support/helper.js'
import { startDevTool } from './dev-tool.js'

t.test('a mail the service sends: one log line with its recipient, subject and link, and a row of the page', async (t) => {
  const mail = startDevTool(t, 'mail-dev', ['--smtp-port', '0', '--http-port', '0'])
  const smtpUrl = (await mail.waitFor(/^SMTP_URL=(smtp:\/\/127\.0\.0\.1:\d+)$/m))[1]!
  const pageUrl = (await mail.waitFor(/the messages at (http:\/\/127\.0\.0\.1:\d+\/)/))[1]!

  const app = await build(t, { SMTP_URL: smtpUrl, EMAIL_POLL_INTERVAL_MS: '100' })
  const email = uniqueEmail('mail-dev')
  await registerUser(app, { email })
  app.mail.wake()

  const line = await mail.waitFor(new RegExp(`^mail to=${email.replace(/[.+]/g, '\\$&')} subject=("[^"]*") links=(\\S+)$`, 'm'))
  t.match(JSON.parse(line[1]!), /^Welcome/, 'the line gives the subject')
  const link = line[2]!
  t.match(link, /^http:\/\/localhost:3000\/verify-email\?token=[\w-]+$/, 'and the verification link, whole')

  const list = await (await fetch(pageUrl)).text()
  const row = new RegExp(`<tr class="message">.*?<td class="to">${email.replace(/[.+]/g, '\\$&')}</td><td class="subject"><a href="(/messages/\\d+)">Welcome[^<]*</a></td><td class="links"><a href="([^"]+)">`, 's').exec(list)
  t.ok(row, 'the page lists it', { list })
  t.equal(row?.[2], link, 'with its link')
  const message = await (await fetch(new URL(row![1]!, pageUrl))).text()
  t.match(message, link, 'its own page has the text')
  t.match(message, /<iframe sandbox src="\/messages\/\d+\/html">/, 'and the HTML, sandboxed')
})
