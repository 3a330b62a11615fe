// Whether an account exists must not show: not in the answer, and not in the work the answer
// costs. Shown here as equal work, counted, not timed (a timed ratio flakes on a busy machine;
// the times themselves are the benchmark's: `npm run bench -- --only=timing`, bench/timing.ts):
// - sign-in: an unknown email and a wrong password get the same bytes after the same bcrypt
//   work, one comparison each (an unknown email compares against a dummy hash), as the hashing
//   pool's own counter at GET /metrics shows.
// ("Forgot password", the same statement after the answer whether or not the address has an
// account: test/accounts/accounts-service.test.ts.)
import t from 'tap'
import { build, registerUser, uniqueEmail } from '../support/helper.js'

const METRICS_TOKEN = 'a-metrics-token-for-the-test'

t.test('sign-in: an unknown email and a wrong password, the same answer after the same bcrypt work', async (t) => {
  // A cost other than 12, so the dummy hash is made by the first sign-in that needs it (below).
  const app = await build(t, { BCRYPT_ROUNDS: '5', METRICS_TOKEN })
  const user = await registerUser(app)
  const comparisons = async () => {
    const res = await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${METRICS_TOKEN}` } })
    return Number(/^password_hashing_runs_total\{op="compare"\} (\d+)$/m.exec(res.body)?.[1] ?? 0)
  }
  const login = (email: string) => app.inject({ method: 'POST', url: '/auth/login', payload: { email, password: 'wrong password' } })
  // The dummy hash at this cost is made once, by the first unknown email: not part of what is compared.
  await login(uniqueEmail('first'))
  const answers = new Set<string>()
  for (let i = 0; i < 5; i++) {
    for (const [kind, email] of [['unknown email', uniqueEmail('nobody')], ['wrong password', user.email]] as const) {
      const before = await comparisons()
      const res = await login(email)
      answers.add(`${res.statusCode} ${res.body}`)
      t.equal(await comparisons() - before, 1, `${kind}: one bcrypt comparison`)
    }
  }
  t.same(answers, new Set(['401 {"success":false,"error":"Invalid email or password","code":"INVALID_CREDENTIALS"}']), 'one answer, byte for byte')
})
