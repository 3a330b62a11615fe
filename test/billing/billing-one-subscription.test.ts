// One live subscription per user: a new checkout expires the user's open one (also when
// requests race), a second completed checkout is cancelled at the provider, a checkout
// completed after the account is gone is cancelled too unless it ended with the account, and
// deleting an account deletes the provider customer (which cancels its subscriptions) and
// expires its open checkout.
import { randomUUID } from 'node:crypto'
import t from 'tap'
import { billingSetup, PRICE, WEBHOOK_SECRET } from '../support/billing-setup.js'
import { json } from '../support/helper.js'
import { checkoutSessionCompleted, subscriptionUpdated } from '../support/stripe-events.js'

// The warnings kept: the log lines to a list.
const setup = await billingSetup(t, { keepLog: true })
const { app, stripe, logLines, deliver, checkout, stored } = setup
const warnings = (message: string) => setup.logged(40, message)
const newUser = () => setup.newUser('one')
type User = Awaited<ReturnType<typeof newUser>>

const userExists = async (user: User) =>
  (await app.db.selectFrom('users').select('id').where('id', '=', user.id).executeTakeFirst()) !== undefined
const sessionsOf = (customerId: string) => [...stripe.checkoutSessions.values()].filter((s) => s.customer === customerId)
const liveSubscriptionsOf = (customerId: string) =>
  [...stripe.subscriptions.values()].filter((s) => s.customer === customerId && !['canceled', 'incomplete_expired'].includes(s.status))
const callsTo = (method: string, path: string) => stripe.calls.filter((c) => c.method === method && c.path === path)

t.test('a new checkout expires the user\'s open one: it can no longer be paid', async (t) => {
  const user = await newUser()
  const first = await checkout(user)
  stripe.reset()
  const second = await checkout(user)
  t.not(second, first)
  t.equal(callsTo('POST', `/v1/checkout/sessions/${first}/expire`).length, 1, 'the first session was expired at the provider')
  t.equal(stripe.checkoutSessions.get(first).status, 'expired')
  t.equal(stripe.checkoutSessions.get(second).status, 'open')
  t.throws(() => stripe.completeCheckout(first), /expired/, 'the first one cannot be paid')
})

t.test('concurrent checkouts of one user leave exactly one session open', async (t) => {
  for (const concurrency of [2, 4]) {
    const user = await newUser()
    const answers = await Promise.all(Array.from({ length: concurrency }, () =>
      app.inject({ method: 'POST', url: '/checkout', headers: user.auth, payload: { priceId: PRICE } })))
    t.same(answers.map((r) => r.statusCode), answers.map(() => 200), `${concurrency} at once: all answered`)
    const customerId = (await stored(user)).payment_customer_id!
    const sessions = sessionsOf(customerId)
    t.equal(sessions.length, concurrency, 'one session each')
    const open = sessions.filter((s) => s.status === 'open')
    t.equal(open.length, 1, `${concurrency} at once: exactly one left open, the others expired`)
    t.same(sessions.filter((s) => s.status !== 'open').map((s) => s.status), Array(concurrency - 1).fill('expired'))
  }
})

t.test('a session completed before the next checkout: the expire refusal is not an error', async (t) => {
  const user = await newUser()
  const first = await checkout(user)
  stripe.completeCheckout(first) // paid, but its webhook has not arrived yet
  stripe.reset()
  const res = await app.inject({ method: 'POST', url: '/checkout', headers: user.auth, payload: { priceId: PRICE } })
  t.equal(res.statusCode, 200, `answered ${res.body}`)
  t.equal(callsTo('POST', `/v1/checkout/sessions/${first}/expire`).length, 1, 'the expire was tried')
  t.equal(stripe.checkoutSessions.get(first).status, 'complete', 'and refused by the provider, as Stripe does')
})

t.test('a second completed checkout is cancelled at the provider, whichever webhook comes first', async (t) => {
  for (const firstDelivered of ['the first paid', 'the second paid'] as const) {
    const user = await newUser()
    // Two tabs: the first session is paid before the second checkout starts; both complete.
    const a = stripe.completeCheckout(await checkout(user))
    const b = stripe.completeCheckout(await checkout(user))
    const customerId = (await stored(user)).payment_customer_id!
    t.equal(liveSubscriptionsOf(customerId).length, 2, `${firstDelivered}: two live subscriptions at the provider`)
    const [linked, extra] = firstDelivered === 'the first paid' ? [a, b] : [b, a]
    stripe.reset()
    t.equal((await deliver(checkoutSessionCompleted(linked.session))).statusCode, 200)
    t.equal((await deliver(checkoutSessionCompleted(extra.session))).statusCode, 200)
    await app.billingActions.runOnce() // the cancel follows the answer (test/billing/billing-provider-actions.test.ts)
    t.match(await stored(user), { plan: 'pro', payment_subscription_status: 'active', payment_subscription_id: linked.subscription.id }, `${firstDelivered}: the first linked stays`)
    t.equal(callsTo('DELETE', `/v1/subscriptions/${extra.subscription.id}`).length, 1, `${firstDelivered}: the extra one cancelled at the provider`)
    t.same(liveSubscriptionsOf(customerId).map((s) => s.id), [linked.subscription.id], `${firstDelivered}: one live subscription left`)
    t.match(warnings('checkout completed a second subscription while one is live: cancelling it').at(-1),
      { userId: user.id, subscriptionId: extra.subscription.id }, `${firstDelivered}: a warning says so`)

    // Cancel and delete reach the one that bills.
    const cancelled = await app.inject({ method: 'DELETE', url: '/subscription', headers: user.auth })
    t.equal(cancelled.statusCode, 200)
    t.equal(stripe.subscriptions.get(linked.subscription.id).cancel_at_period_end, true)
    const deleted = await app.inject({ method: 'DELETE', url: '/account/delete', headers: user.auth })
    t.equal(deleted.statusCode, 200, `answered ${deleted.body}`)
    t.same(liveSubscriptionsOf(customerId), [], `${firstDelivered}: nothing bills after the account is deleted`)
  }
})

t.test('a checkout after an unpaid subscription cancels the unpaid one: paying its old invoice later bills nothing beside the new one', async (t) => {
  const user = await newUser()
  const first = stripe.completeCheckout(await checkout(user))
  t.equal((await deliver(checkoutSessionCompleted(first.session))).statusCode, 200)
  // Every retry of a payment failed, and the provider is set to leave the subscription unpaid
  // (not cancelled): it still exists there, and paying its open invoice makes it active again.
  stripe.subscriptions.get(first.subscription.id).status = 'unpaid'
  const unpaid = subscriptionUpdated(stripe.subscriptions.get(first.subscription.id), { created: Math.floor(Date.now() / 1000) + 5 })
  t.equal((await deliver(unpaid)).statusCode, 200)
  t.match(await stored(user), { plan: 'free', payment_subscription_status: 'unpaid' })
  const customerId = (await stored(user)).payment_customer_id!

  const second = stripe.completeCheckout(await checkout(user))
  stripe.reset()
  t.equal((await deliver(checkoutSessionCompleted(second.session))).statusCode, 200)
  await app.billingActions.runOnce()
  t.match(await stored(user), { plan: 'pro', payment_subscription_status: 'active', payment_subscription_id: second.subscription.id }, 'the new one is stored')
  t.equal(callsTo('DELETE', `/v1/subscriptions/${first.subscription.id}`).length, 1, 'the unpaid one is cancelled at the provider')
  t.same(liveSubscriptionsOf(customerId).map((s) => s.id), [second.subscription.id], 'one subscription left that can bill')
  const action = await app.db.selectFrom('billing_provider_actions').select(['reason', 'user_id']).where('subscription_id', '=', first.subscription.id).executeTakeFirst()
  t.same(action, { reason: 'replaced', user_id: user.id }, 'recorded, with why')
})

t.test('account deletion deletes the provider customer and expires the open checkout', async (t) => {
  const user = await newUser()
  const sessionId = await checkout(user)
  const customerId = (await stored(user)).payment_customer_id!
  stripe.reset()
  const res = await app.inject({ method: 'DELETE', url: '/account/delete', headers: user.auth })
  t.equal(res.statusCode, 200, `answered ${res.body}`)
  t.same(stripe.calls.map((c) => `${c.method} ${c.path}`), [
    `POST /v1/checkout/sessions/${sessionId}/expire`,
    `DELETE /v1/customers/${customerId}`
  ], 'the open session expired, then the customer deleted')
  t.equal(stripe.checkoutSessions.get(sessionId).status, 'expired')
  t.ok(stripe.deletedCustomers.has(customerId), 'the customer is deleted at the provider')
  t.throws(() => stripe.completeCheckout(sessionId), 'the session cannot be paid any more')
  t.notOk(await userExists(user))
})

t.test('account deletion: a provider failure is a 502 and deletes nothing', async (t) => {
  // Failing at the first provider call: expiring the open checkout, or deleting the customer.
  const withOpenCheckout = await newUser()
  await checkout(withOpenCheckout)
  const subscribed = await newUser()
  const { session, subscription } = stripe.completeCheckout(await checkout(subscribed))
  t.equal((await deliver(checkoutSessionCompleted(session))).statusCode, 200)
  for (const [name, user] of [['an open checkout', withOpenCheckout], ['a live subscription', subscribed]] as const) {
    const customerId = (await stored(user)).payment_customer_id!
    stripe.reset()
    stripe.failNext(1, 'error')
    const res = await app.inject({ method: 'DELETE', url: '/account/delete', headers: user.auth })
    t.equal(res.statusCode, 502, `${name}: provider failing`)
    t.same(json(res), { success: false, error: 'Payment provider error', code: 'PAYMENT_PROVIDER_ERROR' })
    t.equal(stripe.calls.length, 1, `${name}: nothing asked of the provider after the failure`)
    t.ok(await userExists(user), `${name}: the user is still there`)
    t.notOk(stripe.deletedCustomers.has(customerId), `${name}: the customer too`)
    stripe.reset()
    t.equal((await app.inject({ method: 'DELETE', url: '/account/delete', headers: user.auth })).statusCode, 200, `${name}: deleted once the provider answers`)
    t.ok(stripe.deletedCustomers.has(customerId), `${name}: the customer deleted at the provider`)
  }
  t.equal(stripe.subscriptions.get(subscription.id).status, 'canceled', 'deleting the customer cancelled its subscription')
})

t.test('a checkout completed after the account is gone: nothing to do once it ended, cancelled at the provider if not', async (t) => {
  // Paid at the provider, then the account deleted before the webhook arrived.
  const user = await newUser()
  const { session, subscription } = stripe.completeCheckout(await checkout(user))
  t.equal((await app.inject({ method: 'DELETE', url: '/account/delete', headers: user.auth })).statusCode, 200)
  t.equal(stripe.subscriptions.get(subscription.id).status, 'canceled', 'cancelled with the customer')
  const late = await deliver(checkoutSessionCompleted(session))
  t.equal(late.statusCode, 200, 'the late webhook is acknowledged')

  // A subscription the deletion could not reach: the webhook cancels it.
  const stray = stripe.createSubscription({ customer: 'cus_StrayCustomer01', price: PRICE })
  stripe.reset()
  const orphan = await deliver(checkoutSessionCompleted({ ...session, id: `cs_test_${randomUUID().replaceAll('-', '')}`, client_reference_id: randomUUID(), metadata: {}, customer: 'cus_StrayCustomer01', subscription: stray.id }))
  t.equal(orphan.statusCode, 200)
  await app.billingActions.runOnce()
  t.equal(callsTo('DELETE', `/v1/subscriptions/${stray.id}`).length, 1, 'cancelled at the provider')
  t.equal(stripe.subscriptions.get(stray.id).status, 'canceled')
  t.match(warnings('checkout completed for an account that no longer exists: cancelling its subscription').at(-1), { subscriptionId: stray.id })
})

t.test('no secret or token in the log lines', async (t) => {
  t.ok(logLines.length > 0, `${logLines.length} lines`)
  const log = logLines.join('\n')
  for (const secret of ['sk_test_standin', WEBHOOK_SECRET, 'Bearer ', 'v1=']) t.notOk(log.includes(secret), `no ${secret}`)
})
