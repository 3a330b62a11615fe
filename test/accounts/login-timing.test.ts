// Unknown email and wrong password must be indistinguishable: same answer, and no
// measurable timing difference (both pay for one bcrypt comparison at the configured cost,
// test/support/helper.ts's 4 rounds or another). Benchmark-style:
// prints both medians, asserts only a generous ratio.
import t from 'tap'
import { build, registerUser, uniqueEmail } from '../support/helper.js'
import { timeAlternately } from '../support/timing.js'

t.test('unknown email and wrong password: same answer, same cost (20 tries each)', async (t) => {
  // A cost where bcrypt (~20 ms) still dwarfs the database (~1 ms), as in production, at a
  // sixteenth of the production cost's time: without the dummy hash the ratio would be ~0.05.
  const app = await build(t, { BCRYPT_ROUNDS: '8' })
  const user = await registerUser(app)
  const login = (email: () => string) => () => app.inject({ method: 'POST', url: '/auth/login', payload: { email: email(), password: 'wrong password' } })
  const { answers, medians: [mu, mw] } = await timeAlternately(20, login(() => uniqueEmail('nobody')), login(() => user.email))
  t.same(answers, new Set(['401 {"success":false,"error":"Invalid email or password","code":"INVALID_CREDENTIALS"}']))
  t.comment(`login failure medians: unknown email ${mu.toFixed(1)} ms, wrong password ${mw.toFixed(1)} ms`)
  // Generous on purpose: a real difference would be the whole bcrypt cost (a ratio of 10 or more).
  t.ok(mu / mw > 0.5 && mu / mw < 2, `ratio ${(mu / mw).toFixed(2)} within 0.5–2`)
})
