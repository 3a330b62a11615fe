// The typed example client (examples/client.ts, generated from openapi.json) against the
// real server: a consumer's generated client works end to end.
import t from 'tap'
import { exchangeSignInCode, forgotPassword, makeApiKey, resetPassword, scriptWithApiKey, securityCheckup, turnOnTwoStep, walkthrough } from '../../examples/client.js'
import { testDatabaseEnv, TEST_SECRET, uniqueEmail } from '../support/helper.js'
import { freePort, startServer, waitUntilUp } from './process.js'
import { startSmtpSink } from '../support/smtp-sink.js'
import { startStripeStandIn } from '../support/stripe-stand-in.js'
import { codeAt } from '../support/totp.js'

t.test('register, sign in, create and list tasks, start a checkout through the generated client', async (t) => {
  const stripe = await startStripeStandIn()
  t.teardown(() => stripe.close())
  const smtp = await startSmtpSink()
  t.teardown(() => smtp.close())
  const server = startServer({
    PORT: String(await freePort()),
    AUTH_JWT_SECRET: TEST_SECRET,
    PAYMENT_SECRET_KEY: 'sk_test_example',
    PAYMENT_PRICE_IDS: 'price_pro_monthly',
    PAYMENT_API_URL: stripe.url,
    SMTP_URL: smtp.url,
    // Every call here comes from 127.0.0.1: room for the walkthroughs' sign-ins and registrations (the default is 10 a minute).
    AUTH_RATE_LIMIT_MAX: '50',
    ...await testDatabaseEnv(t)
  })
  t.teardown(() => { server.child.kill('SIGKILL') })
  await waitUntilUp(server)

  const email = uniqueEmail('client')
  const result = await walkthrough(server.base, { email, password: 'correct horse battery', priceId: 'price_pro_monthly' })
  t.equal(result.user.email, email)
  t.match(result.task, { title: 'Try the typed client', status: 'in-progress', completedAt: null })
  t.same(result.tasks.map((task) => task.id), [result.task.id])
  t.same(result.counts, { total: 1, todo: 0, inProgress: 1, completed: 0 })
  t.equal(result.totalHeader, 1)
  const [sessionId, session] = [...stripe.checkoutSessions.entries()].at(-1)!
  t.equal(result.checkoutUrl, session.url)
  t.equal(result.checkoutSessionId, sessionId)

  // Run again for the same email: the client reads the code EMAIL_TAKEN and signs in instead.
  const again = await walkthrough(server.base, { email, password: 'correct horse battery', priceId: 'price_pro_monthly' })
  t.equal(again.user.id, result.user.id)
  t.equal(again.counts.total, 2)

  // Forgot password, then the link's token through the same typed client.
  await forgotPassword(server.base, email)
  const mail = await smtp.waitFor((m) => m.to === email && /^Reset your password/.test(m.subject))
  const reset = await resetPassword(server.base, mail.token!, 'a new horse battery')
  t.equal(reset.user.id, result.user.id)
  await t.rejects(resetPassword(server.base, mail.token!, 'once more please'), /RESET_TOKEN_INVALID/)

  // Sessions and the security feed through the same client: the reset signed in anew.
  const checkup = await securityCheckup(server.base, reset.token)
  t.match(checkup.current, { method: 'password-reset', current: true })
  t.same(checkup.others, [], 'the reset ended every older session')
  t.equal(checkup.ended, 0)
  t.same(checkup.events.slice(0, 3).map((event) => event.type), ['other-sessions-ended', 'sign-in', 'password-changed'])
  t.same(checkup.providers, [], 'no identity provider configured')
  await t.rejects(exchangeSignInCode(server.base, 'not-a-code'), /SIGN_IN_CODE_INVALID/)

  // The API-key mode: a key made from the fresh session, then a script with the key alone.
  const { key, prefix } = await makeApiKey(server.base, reset.token, 'nightly import', ['tasks:read', 'tasks:write'])
  t.match(key, /^tsk_[0-9A-Za-z]{49}$/)
  t.equal(prefix, key.slice(4, 12))
  const script = await scriptWithApiKey(server.base, key)
  t.equal(script.task.title, 'Filed by a script')
  t.equal(script.total, 3, 'the account\'s tasks')
  t.equal(script.accountRefusal, 'API_KEY_NOT_ALLOWED', 'the key reaches no account route')

  // Two-step sign-in through the same client: on with the app's first code, then a sign-in asks for the next.
  let seed = ''
  const { recoveryCodes } = await turnOnTwoStep(server.base, reset.token, 'a new horse battery', async (otpauthUrl, secret) => {
    t.match(otpauthUrl, /^otpauth:\/\/totp\//)
    seed = secret
    return codeAt(secret, Date.now())
  })
  t.equal(recoveryCodes.length, 10)
  await t.rejects(walkthrough(server.base, { email, password: 'a new horse battery', priceId: 'price_pro_monthly' }), /two-step sign-in is on/)
  const twoStep = await walkthrough(server.base, { email, password: 'a new horse battery', priceId: 'price_pro_monthly' }, async (methods) => {
    t.same(methods, ['totp', 'recovery'])
    return { code: codeAt(seed, Date.now() + 30_000) }
  })
  t.equal(twoStep.user.id, result.user.id, 'signed in with the password and the next code')
})
