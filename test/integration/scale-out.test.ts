// Two instances on one PostgreSQL database and one Redis, as behind a load balancer:
// nothing one instance needs lives only in the other's memory.
import t from 'tap'
import { build, failedLogin, json, randomAddress, registerUser, serverDatabase, uniqueEmail } from '../support/helper.js'
import { checkoutSessionCompleted, signedDelivery } from '../support/stripe-events.js'
import { startStripeStandIn } from '../support/stripe-stand-in.js'

const { url: databaseUrl } = await serverDatabase(t, 'scale')

const WEBHOOK_SECRET = 'whsec_scale_out'
const stripe = await startStripeStandIn()
t.teardown(() => stripe.close())
const env = {
  DATABASE_URL: databaseUrl.toString(),
  REDIS_URL: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
  AUTH_RATE_LIMIT_MAX: '4',
  PAYMENT_SECRET_KEY: 'sk_test_scale',
  PAYMENT_WEBHOOK_SECRET: WEBHOOK_SECRET,
  PAYMENT_PRICE_IDS: 'price_pro_monthly',
  PAYMENT_API_URL: stripe.url,
  PAYMENT_MAX_RETRIES: '0'
}
// Both start at once: the migrations take a lock, so one migrates and the other waits.
const [a, b] = await Promise.all([build(t, env), build(t, env)]) as [Awaited<ReturnType<typeof build>>, Awaited<ReturnType<typeof build>>]

t.test('a token issued by one instance works on the other; logout on one revokes on both', async (t) => {
  const user = await registerUser(a)
  const me = await b.inject({ method: 'GET', url: '/auth/me', headers: user.auth })
  t.equal(me.statusCode, 200)
  t.equal(json(me).data.id, user.id)
  t.equal((await b.inject({ method: 'POST', url: '/auth/logout', headers: user.auth })).statusCode, 200)
  t.equal((await a.inject({ method: 'GET', url: '/auth/me', headers: user.auth })).statusCode, 401, 'revoked everywhere')
})

t.test('one webhook event delivered to both instances at the same moment is applied once', async (t) => {
  const user = await registerUser(a)
  await a.inject({ method: 'POST', url: '/checkout', headers: user.auth, payload: { priceId: 'price_pro_monthly' } })
  const { session } = stripe.completeCheckout([...stripe.checkoutSessions.keys()].at(-1)!)
  const event = checkoutSessionCompleted(session)
  const deliver = (app: typeof a) => {
    const { body, headers } = signedDelivery(event, WEBHOOK_SECRET)
    return app.inject({ method: 'POST', url: '/webhooks/payment', headers, payload: body })
  }
  const answers = await Promise.all([deliver(a), deliver(b), deliver(a), deliver(b)])
  t.same(answers.map((r) => r.statusCode), [200, 200, 200, 200])
  const upgrades = await a.db.selectFrom('usage_events').select('id').where('user_id', '=', user.id).where('name', '=', 'subscription_upgraded').execute()
  t.equal(upgrades.length, 1, 'applied exactly once')
  t.equal(json(await b.inject({ method: 'GET', url: '/subscription', headers: user.auth })).data.plan, 'pro')
})

t.test('the sign-in rate limit is shared through Redis', async (t) => {
  const remoteAddress = randomAddress()
  const statuses = []
  for (const app of [a, b, a, b, a]) statuses.push((await failedLogin(app, uniqueEmail(), remoteAddress)).statusCode)
  t.same(statuses, [401, 401, 401, 401, 429])
})

t.test('failures per account are shared too: an account that failed on one instance is locked on the other', async (t) => {
  const target = uniqueEmail('shared-target')
  const guessers = [randomAddress(), randomAddress(), randomAddress(), randomAddress()]
  for (const guesser of guessers) t.equal((await failedLogin(a, target, guesser)).statusCode, 401)
  t.equal((await failedLogin(b, target, guessers[0]!)).statusCode, 429)
})
