// "Forgot password" must not tell whether an address has an account: the same bytes, and no
// measurable timing difference (the reset token and email are written after the answer).
// Benchmark-style, like login-timing.test.ts: prints both medians, asserts only a generous ratio.
import t from 'tap'
import { build, registerUser, uniqueEmail, until } from './helper.js'
import { timeAlternately } from './timing.js'

t.test('known and unknown addresses: same answer, same time (20 tries each)', async (t) => {
  const app = await build(t)
  const user = await registerUser(app)
  const forgot = (email: () => string) => () => app.inject({ method: 'POST', url: '/auth/password/forgot', payload: { email: email() } })
  // The pause lets the queueing that follows a known address finish before the next measurement.
  const { answers, medians: [mu, mk] } = await timeAlternately(20, forgot(() => uniqueEmail('nobody')), forgot(() => user.email), 20)
  t.same(answers, new Set(['202 {"success":true,"data":null}']))
  t.comment(`forgot medians: unknown address ${mu.toFixed(2)} ms, known address ${mk.toFixed(2)} ms`)
  // Generous on purpose: awaiting the queueing would add a transaction of several writes.
  t.ok(mu / mk > 0.5 && mu / mk < 2, `ratio ${(mu / mk).toFixed(2)} within 0.5–2`)
  // The last request's queueing follows its answer, with no pause after it: wait for it (bounded).
  const queued = async () => (await app.db.selectFrom('email_outbox').select('id')
    .where('recipient', '=', user.email).where('kind', '=', 'password_reset').execute()).length
  await until(async () => await queued() >= 20, 'the 20th reset email to be queued', 5_000)
  t.equal(await queued(), 20, 'every request for the known address queued its email')
})
