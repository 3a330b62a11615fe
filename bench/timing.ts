// Whether an account exists must not show in the time its answer takes. The tests count the
// equal work (test/accounts/equal-work.test.ts: one bcrypt comparison either way;
// accounts-service.test.ts: the same statement after "forgot" either way); the times
// themselves are measured here, against the service as production runs it, where a noisy moment costs a figure and not a red suite.
// - sign-in: an unknown email and a wrong password, sent alternately, medians compared;
// - "forgot password": an unknown and a known address, medians compared; then the request
//   sent right after each answer (GET /auth/me), lower quartiles compared, since work begun in
//   the answer's wake for a known address only would slow it.
// Targets: each ratio within 0.5–2 (a real difference is the whole bcrypt cost, ×10 or more;
// queueing the reset mail inside the request was ×2.5–3).
import type { Bench } from './context.js'
import { fmt, log, step } from './log.js'
import { JSON_HEADERS } from './requests.js'
import { emailOf, PASSWORD } from './seed.js'
import type { Timing, TimingPair } from './types.js'

const TRIES = 20

const quantile = (xs: number[], q: number): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * q)]!
const pair = (first: number, second: number): TimingPair => ({ first, second, ratio: first / second })

async function timed (send: () => Promise<Response>, expect: number): Promise<number> {
  const started = process.hrtime.bigint()
  const res = await send()
  await res.arrayBuffer()
  if (res.status !== expect) throw new Error(`timing: expected ${expect}, got ${res.status}`)
  return Number(process.hrtime.bigint() - started) / 1e6
}

export async function runTiming ({ service, accounts, options }: Bench): Promise<Timing> {
  step(`timing: an unknown account against a known one, ${TRIES} tries each, alternately`)
  const post = (path: string, body: unknown) => () => fetch(`${service.url}${path}`, { method: 'POST', headers: JSON_HEADERS, body: JSON.stringify(body) })
  let n = 0
  const nobody = () => `nobody-${process.pid}-${n++}@bench.test`
  // The service runs with AUTH_RATE_LIMIT_MAX=0: wrong passwords lock nothing. Each known
  // address asks once (while there are TRIES users), under EMAIL_LINK_MAX_PER_HOUR, so each
  // one really queues its mail.
  const known = (i: number) => emailOf(1 + (i % options.settings.users))
  const login: [number[], number[]] = [[], []]
  const forgot: [number[], number[]] = [[], []]
  const after: [number[], number[]] = [[], []]
  const me = () => fetch(`${service.url}/auth/me`, { headers: { authorization: `Bearer ${accounts.readerTokens[0]!}` } })
  for (let i = 0; i < TRIES; i++) {
    login[0].push(await timed(post('/auth/login', { email: nobody(), password: PASSWORD + 'x' }), 401))
    login[1].push(await timed(post('/auth/login', { email: known(i), password: PASSWORD + 'x' }), 401))
  }
  for (let i = 0; i < TRIES; i++) {
    for (const [kind, email] of [nobody(), known(i)].entries()) {
      forgot[kind]!.push(await timed(post('/auth/password/forgot', { email }), 202))
      await new Promise((resolve) => setImmediate(resolve))
      after[kind]!.push(await timed(me, 200))
      // Lets the queueing that follows each answer finish before the next measurement.
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
  }
  const timing: Timing = {
    login: pair(quantile(login[0], 0.5), quantile(login[1], 0.5)),
    forgot: pair(quantile(forgot[0], 0.5), quantile(forgot[1], 0.5)),
    afterForgot: pair(quantile(after[0], 0.25), quantile(after[1], 0.25))
  }
  log(`  login medians: unknown email ${fmt(timing.login.first)} ms, wrong password ${fmt(timing.login.second)} ms (×${fmt(timing.login.ratio, 2)})`)
  log(`  forgot medians: unknown address ${fmt(timing.forgot.first)} ms, known ${fmt(timing.forgot.second)} ms (×${fmt(timing.forgot.ratio, 2)})`)
  log(`  the next request, lower quartiles: after an unknown address ${fmt(timing.afterForgot.first)} ms, a known one ${fmt(timing.afterForgot.second)} ms (×${fmt(timing.afterForgot.ratio, 2)})`)
  return timing
}
