// "Forgot password" must not tell whether an address has an account: the same bytes, and no
// measurable timing difference (the reset token and email are written after the answer).
// Benchmark-style, like login-timing.test.ts: prints both medians, asserts only a generous ratio.
import t from 'tap'
import { build, registerUser, uniqueEmail } from './helper.js'

t.test('known and unknown addresses: same answer, same time (20 tries each)', async (t) => {
  const app = await build(t)
  const user = await registerUser(app)
  const time = async (email: string) => {
    const started = process.hrtime.bigint()
    const res = await app.inject({ method: 'POST', url: '/auth/password/forgot', payload: { email } })
    const ms = Number(process.hrtime.bigint() - started) / 1e6
    // Let the queueing that follows a known address finish before the next measurement.
    await new Promise((resolve) => setTimeout(resolve, 20))
    return { ms, status: res.statusCode, body: res.body }
  }
  const unknown = []
  const known = []
  for (let i = 0; i < 20; i++) {
    unknown.push(await time(uniqueEmail('nobody')))
    known.push(await time(user.email))
  }
  t.same(new Set([...unknown, ...known].map((r) => `${r.status} ${r.body}`)), new Set(['202 {"success":true,"data":null}']))
  const median = (xs: number[]) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
  const [mu, mk] = [median(unknown.map((r) => r.ms)), median(known.map((r) => r.ms))]
  t.comment(`forgot medians: unknown address ${mu.toFixed(2)} ms, known address ${mk.toFixed(2)} ms`)
  // Generous on purpose: awaiting the queueing would add a transaction of several writes.
  t.ok(mu / mk > 0.5 && mu / mk < 2, `ratio ${(mu / mk).toFixed(2)} within 0.5–2`)
  const queued = await app.db.selectFrom('email_outbox').select('id').where('recipient', '=', user.email).where('kind', '=', 'password_reset').execute()
  t.equal(queued.length, 20, 'every request for the known address queued its email')
})
