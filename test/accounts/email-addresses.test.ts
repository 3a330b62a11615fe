// Which email addresses the service takes: one mailbox each, never a string a mail library
// reads as another mailbox or as several. Every route that takes an address uses the same
// rule; the mailer hands SMTP an address, not a list to parse.
import { domainToUnicode } from 'node:url'
import t from 'tap'
import { build, json, registerUser, until } from '../support/helper.js'
import { startSmtpSink } from '../support/smtp-sink.js'

const sink = await startSmtpSink()
t.teardown(() => sink.close())
const app = await build(t, { SMTP_URL: sink.url, EMAIL_POLL_INTERVAL_MS: '100' })

// Each of these was accepted and then mailed somewhere else than it reads (in parentheses).
const MISREAD = [
  '"x"<a@example.com>', // a display name: mailed to a@example.com
  'b@example.com,third', // a list: mailed to b@example.com (and "third")
  '<d@example.com', // mailed to d@example.com
  'l(comment)@example.com', // a comment: mailed to l@example.com
  'h@ex;ample.com', // a group's end: mailed to h@ex
  'two@at@example.com',
  'dots..in@example.com',
  'trailing@example.com.',
  'space in@example.com',
  'tab@exam\tple.com'
]

t.test('every route that takes an address refuses those that read as another mailbox: 400 with a code', async (t) => {
  const owner = await registerUser(app)
  const routes: Array<[string, (email: string) => Promise<Awaited<ReturnType<typeof app.inject>>>, object]> = [
    ['register', (email) => app.inject({ method: 'POST', url: '/auth/register', payload: { email, password: 'correct horse battery' } }), { error: 'Validation failed', code: 'VALIDATION_FAILED' }],
    ['login', (email) => app.inject({ method: 'POST', url: '/auth/login', payload: { email, password: 'correct horse battery' } }), { error: 'Invalid input', code: 'INVALID_INPUT' }],
    ['forgot', (email) => app.inject({ method: 'POST', url: '/auth/password/forgot', payload: { email } }), { error: 'Validation failed', code: 'VALIDATION_FAILED' }],
    ['profile email change', (email) => app.inject({ method: 'PATCH', url: '/account/profile', headers: owner.auth, payload: { email, currentPassword: owner.password } }), { error: 'Validation failed', code: 'VALIDATION_FAILED' }]
  ]
  for (const [route, send, refusal] of routes) {
    for (const email of MISREAD) {
      const res = await send(email)
      t.equal(res.statusCode, 400, `${route}: ${JSON.stringify(email)}`)
      t.same(json(res), { success: false, ...refusal, details: ['Invalid email address - email'] }, `${route}: ${JSON.stringify(email)}`)
    }
  }
  const stored = await app.db.selectFrom('users').select('email').where('email', 'in', MISREAD.map((e) => e.toLowerCase())).execute()
  t.same(stored, [], 'no account has such an address')
  t.equal(json(await app.inject({ method: 'GET', url: '/account/profile', headers: owner.auth })).data.email, owner.email, 'the owner kept their address')
})

t.test('plus-addressing, subdomains, other atext and internationalized addresses are accepted and mailed to that one mailbox', async (t) => {
  const tag = Math.random().toString(36).slice(2, 8)
  const cases = [
    `ada+tasks-${tag}@example.com`,
    `first.last-${tag}@mail.eu.example.co.uk`,
    `o'neil_${tag}@example.com`,
    `  Mixed.Case-${tag}@Example.COM  `,
    // Internationalized: the domain goes out as punycode, a non-ASCII local part as UTF-8
    // (SMTPUTF8); the sink reads the domain back in Unicode.
    `jorg-${tag}@bücher.example`,
    `jörg-${tag}@bücher.example`,
    `名前-${tag}@例え.jp`
  ]
  // The mailbox an envelope address names, its domain in Unicode.
  const mailbox = (address: string) => {
    const at = address.lastIndexOf('@')
    return `${address.slice(0, at)}@${domainToUnicode(address.slice(at + 1))}`
  }
  for (const typed of cases) {
    const delivered = typed.trim().toLowerCase()
    const res = await app.inject({ method: 'POST', url: '/auth/register', payload: { email: typed, password: 'correct horse battery' } })
    t.equal(res.statusCode, 201, JSON.stringify(typed))
    const stored = json(res).user.email
    t.equal(stored, typed.trim().toLowerCase(), 'stored trimmed and lower-cased')
    const welcome = await sink.waitFor((m) => m.envelope.map(mailbox).includes(delivered), 10_000)
    t.same(welcome.envelope.map(mailbox), [delivered], `${JSON.stringify(typed)}: one recipient`)
    t.match(welcome.subject, /^Welcome/)
    const login = await app.inject({ method: 'POST', url: '/auth/login', payload: { email: typed, password: 'correct horse battery' } })
    t.equal(login.statusCode, 200, 'signs in with the address as typed')
  }
})

t.test('an address stored before this rule is handed to SMTP as one mailbox, never as a list', async (t) => {
  // Rows as an older version could have queued them for accounts it accepted.
  const tag = Math.random().toString(36).slice(2, 8)
  const stored = [`b-${tag}@example.com,third-${tag}@example.com`, `"x-${tag}"<a-${tag}@example.com>`]
  const ids = (await app.db.insertInto('email_outbox')
    .values(stored.map((recipient) => ({ kind: 'password_changed', recipient, subject: 'Your password was changed', text_body: 'changed', html_body: '<p>changed</p>' })))
    .returning('id').execute()).map((row) => row.id)
  // A pass of the sender, awaited: both rows are due now.
  await app.mail.sender.runOnce()
  const rows = () => app.db.selectFrom('email_outbox').select(['sent_at', 'failed_at']).where('id', 'in', ids).execute()
  await until(async () => (await rows()).every((row) => row.sent_at !== null || row.failed_at !== null), 'both rows handled')
  const reached = sink.received.flatMap((m) => m.envelope).filter((address) => address.includes(tag))
  for (const wrong of [`b-${tag}@example.com`, `third-${tag}@example.com`, `a-${tag}@example.com`]) {
    t.notOk(reached.includes(wrong), `nothing went to ${wrong}`)
  }
})
