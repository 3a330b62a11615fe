// The subscription life cycle end to end through HTTP, against a local Stripe stand-in:
// checkout, webhooks (signed, idempotent, order-proof), portal, cancel, account deletion.
import { sql } from 'kysely'
import t from 'tap'
import { BODY_LIMIT } from '../../server-options.js'
import { billingSetup, PRICE, WEBHOOK_SECRET } from '../support/billing-setup.js'
import { build, json, registerUser } from '../support/helper.js'
import {
  checkoutSessionCompleted, invoicePaymentFailed, invoicePaymentSucceeded, makeEvent,
  signedDelivery, subscriptionDeleted, subscriptionUpdated
} from '../support/stripe-events.js'

const { app, stripe, deliver, subscribe, eventRecorded, stored } = await billingSetup(t, { env: { PAYMENT_TIMEOUT_MS: '500' } })

const now = () => Math.floor(Date.now() / 1000)

const preferencesRow = (userId: string) => stored({ id: userId })

const usageEvents = (userId: string, name: string) =>
  app.db.selectFrom('usage_events').select('properties').where('user_id', '=', userId).where('name', '=', name).execute()

t.test('the full upgrade path: checkout → checkout.session.completed → pro and active', async (t) => {
  const user = await registerUser(app)
  stripe.reset()
  const res = await app.inject({ method: 'POST', url: '/checkout', headers: user.auth, payload: { priceId: PRICE } })
  t.equal(res.statusCode, 200)
  const [sessionId, session] = [...stripe.checkoutSessions.entries()].at(-1)!
  t.same(json(res), { success: true, data: { url: session.url, sessionId } })

  const [createCustomer, createSession] = stripe.calls
  t.match(createCustomer, { method: 'POST', path: '/v1/customers', params: { email: user.email, metadata: { userId: user.id } } })
  t.equal(createCustomer!.idempotencyKey, `customer-create-${user.id}`)
  t.match(createSession, {
    method: 'POST',
    path: '/v1/checkout/sessions',
    params: {
      mode: 'subscription',
      customer: session.customer,
      client_reference_id: user.id,
      metadata: { userId: user.id },
      subscription_data: { metadata: { userId: user.id } },
      line_items: [{ price: PRICE, quantity: '1' }],
      // The origin web client's billing page (APP_URL's default is http://localhost:3000).
      success_url: 'http://localhost:3000/dashboard/billing?success=true',
      cancel_url: 'http://localhost:3000/dashboard/billing?canceled=true'
    }
  })
  t.ok(createSession!.idempotencyKey, 'session creation carries an idempotency key')
  t.equal(createSession!.authorization, 'Bearer sk_test_standin')
  t.equal((await preferencesRow(user.id)).payment_customer_id, session.customer, 'customer stored before the session')

  const before = await app.inject({ method: 'GET', url: '/subscription', headers: user.auth })
  t.same(json(before), { success: true, data: { plan: 'free', status: null, subscriptionId: null, priceId: null, currentPeriodEnd: null, cancelAtPeriodEnd: false, subscription: null } })

  const { session: completed, subscription } = stripe.completeCheckout(sessionId)
  const delivered = await deliver(checkoutSessionCompleted(completed))
  t.equal(delivered.statusCode, 200)
  t.same(json(delivered), { received: true })

  const periodEnd = new Date(subscription.items.data[0].current_period_end * 1000).toISOString()
  const after = await app.inject({ method: 'GET', url: '/subscription', headers: user.auth })
  t.same(json(after), {
    success: true,
    data: {
      plan: 'pro',
      status: 'active',
      subscriptionId: subscription.id,
      priceId: PRICE,
      currentPeriodEnd: periodEnd,
      cancelAtPeriodEnd: false,
      subscription: { id: subscription.id, customerId: session.customer, status: 'active', priceId: PRICE, currentPeriodEnd: periodEnd, cancelAtPeriodEnd: false, plan: 'pro' }
    }
  })
  const preferences = json(await app.inject({ method: 'GET', url: '/preferences', headers: user.auth })).data
  t.match(preferences, { plan: 'pro', paymentCustomerId: session.customer, paymentSubscriptionId: subscription.id, paymentSubscriptionStatus: 'active', paymentPriceId: PRICE, paymentCurrentPeriodEnd: periodEnd })
  t.same(await usageEvents(user.id, 'subscription_upgraded'), [{ properties: { userId: user.id, plan: 'pro' } }])

  const again = await app.inject({ method: 'POST', url: '/checkout', headers: user.auth, payload: { priceId: PRICE } })
  t.equal(again.statusCode, 409)
  t.same(json(again), { success: false, error: 'Subscription already active', code: 'SUBSCRIPTION_ALREADY_ACTIVE' })
})

t.test('two checkouts before paying reuse one provider customer', async (t) => {
  const user = await registerUser(app)
  stripe.reset()
  const [a, b] = await Promise.all([1, 2].map(() => app.inject({ method: 'POST', url: '/checkout', headers: user.auth, payload: { priceId: PRICE } })))
  t.equal(a!.statusCode, 200)
  t.equal(b!.statusCode, 200)
  const customers = [...stripe.customers.values()].filter((c) => c.metadata?.userId === user.id)
  t.equal(customers.length, 1, 'one customer at the provider')
  const sessions = stripe.calls.filter((c) => c.path === '/v1/checkout/sessions')
  t.same(sessions.map((c) => c.params.customer), [customers[0].id, customers[0].id])
  t.equal((await preferencesRow(user.id)).payment_customer_id, customers[0].id)
})

t.test('renewal, dunning, cancel at period end, then deletion: the stored record follows', async (t) => {
  const user = await registerUser(app)
  const { subscription } = await subscribe(user)
  const start = now()

  const renewedEnd = start + 60 * 24 * 3600
  t.equal((await deliver(invoicePaymentSucceeded(subscription, { periodEnd: renewedEnd, created: start + 10 }))).statusCode, 200)
  let data = json(await app.inject({ method: 'GET', url: '/subscription', headers: user.auth })).data
  t.match(data, { plan: 'pro', status: 'active', currentPeriodEnd: new Date(renewedEnd * 1000).toISOString() }, 'renewal moves the period end')

  t.equal((await deliver(invoicePaymentFailed(subscription, { created: start + 20 }))).statusCode, 200)
  data = json(await app.inject({ method: 'GET', url: '/subscription', headers: user.auth })).data
  t.match(data, { plan: 'pro', status: 'past_due' }, 'a failed payment is past_due, still pro')

  const cancelled = await app.inject({ method: 'DELETE', url: '/subscription', headers: user.auth })
  t.equal(cancelled.statusCode, 200)
  t.match(json(cancelled), { success: true, data: { plan: 'pro', subscriptionId: subscription.id, cancelAtPeriodEnd: true, subscription: { id: subscription.id, cancelAtPeriodEnd: true, plan: 'pro' } } })
  t.equal(stripe.subscriptions.get(subscription.id).cancel_at_period_end, true, 'cancelled at the provider')
  t.match(stripe.calls.at(-1), { method: 'POST', path: `/v1/subscriptions/${subscription.id}`, params: { cancel_at_period_end: 'true' } })

  const ended = { ...stripe.subscriptions.get(subscription.id), status: 'canceled' }
  t.equal((await deliver(subscriptionDeleted(ended, { created: start + 30 }))).statusCode, 200)
  data = json(await app.inject({ method: 'GET', url: '/subscription', headers: user.auth })).data
  t.match(data, { plan: 'free', status: 'canceled', cancelAtPeriodEnd: false })
  t.equal((await preferencesRow(user.id)).plan, 'free')

  const none = await app.inject({ method: 'DELETE', url: '/subscription', headers: user.auth })
  t.equal(none.statusCode, 404)
  t.same(json(none), { success: false, error: 'No active subscription', code: 'NO_ACTIVE_SUBSCRIPTION' })
})

t.test('signatures: missing, bad, stale, another secret, one byte changed → 400, nothing applied', async (t) => {
  const user = await registerUser(app)
  const { subscription } = await subscribe(user)
  const event = invoicePaymentFailed(subscription)
  const { body } = signedDelivery(event, WEBHOOK_SECRET)
  const cases: Array<[string, () => ReturnType<typeof deliver>]> = [
    ['missing header', () => app.inject({ method: 'POST', url: '/webhooks/payment', headers: { 'content-type': 'application/json' }, payload: body })],
    ['garbage header', () => deliver(event, { headers: { 'stripe-signature': 't=1,v1=deadbeef' } })],
    ['older than 300 s', () => deliver(event, { timestamp: now() - 301 })],
    ['another secret', () => deliver(event, { secret: 'whsec_someone_else' })],
    ['one byte changed', async () => {
      const signed = signedDelivery(event, WEBHOOK_SECRET)
      const altered = signed.body.replace('invoice.payment_failed', 'invoice.payment_faileD')
      t.equal(altered.length, signed.body.length)
      return app.inject({ method: 'POST', url: '/webhooks/payment', headers: signed.headers, payload: altered })
    }]
  ]
  for (const [name, send] of cases) {
    const res = await send()
    t.equal(res.statusCode, 400, name)
    t.same(json(res), { success: false, error: 'Invalid signature', code: 'INVALID_SIGNATURE' }, name)
  }
  t.equal(await eventRecorded((event as { id: string }).id), false, 'never recorded')
  t.equal((await preferencesRow(user.id)).payment_subscription_status, 'active', 'never applied')
  const fresh = await deliver(event, { timestamp: now() - 299 })
  t.equal(fresh.statusCode, 200, 'within the tolerance it is accepted')
})

const INVALID_SIGNATURE = { success: false, error: 'Invalid signature', code: 'INVALID_SIGNATURE' }

t.test('signature timestamps: the 300 s tolerance applies both ways (a delivery dated ahead is refused too)', async (t) => {
  const user = await registerUser(app)
  const { subscription } = await subscribe(user)
  // Dated from the next whole second: however long the request takes (under a second), the
  // timestamp stays more than 300 s ahead of the server's clock.
  const ahead = (seconds: number) => Math.ceil(Date.now() / 1000) + seconds
  for (const [name, timestamp] of [['a day ahead', ahead(86_400)], ['301 s ahead', ahead(301)]] as const) {
    const event = invoicePaymentFailed(subscription)
    const res = await deliver(event, { timestamp })
    t.equal(res.statusCode, 400, name)
    t.same(json(res), INVALID_SIGNATURE, name)
    t.equal(await eventRecorded(event.id), false, `${name}: not recorded`)
  }
  t.equal((await preferencesRow(user.id)).payment_subscription_status, 'active', 'nothing applied')
  const skewed = await deliver(invoicePaymentFailed(subscription), { timestamp: now() + 299 })
  t.equal(skewed.statusCode, 200, '299 s ahead (a clock a little fast) is accepted')
})

t.test('unsigned bodies are never parsed: whatever they hold, the answer is Invalid signature', async (t) => {
  // 1 MiB of nesting (just under the body limit): parsing it stalls the event loop for
  // 80-170 ms, which nobody without the webhook secret may cost us.
  const depth = BODY_LIMIT / 2 - 1
  const nested = '['.repeat(depth) + ']'.repeat(depth)
  const bodies: Array<[string, string]> = [
    ['1 MiB of nesting', nested],
    ['malformed JSON', '{"id": "evt_1", "type": '],
    ['JSON of the wrong shape', '[{"id": "evt_1"}]'],
    ['a JSON string', '"invoice.payment_failed"'],
    ['an empty body', '']
  ]
  const signatures: Array<[string, Record<string, string>]> = [
    ['no signature', {}],
    ['a forged signature', { 'stripe-signature': `t=${now()},v1=${'0'.repeat(64)}` }]
  ]
  for (const [bodyName, payload] of bodies) {
    for (const [signatureName, signature] of signatures) {
      const name = `${bodyName}, ${signatureName}`
      // Any parse of the body would go through JSON.parse: count the ones of a large text.
      const parse = JSON.parse
      let largeParses = 0
      JSON.parse = (text: string, reviver?: Parameters<typeof parse>[1]) => {
        if (String(text).length > 100_000) largeParses++
        return parse(text, reviver)
      }
      let res
      const started = process.hrtime.bigint()
      try {
        res = await app.inject({ method: 'POST', url: '/webhooks/payment', headers: { 'content-type': 'application/json', ...signature }, payload })
      } finally {
        JSON.parse = parse
      }
      t.equal(res.statusCode, 400, name)
      t.same(json(res), INVALID_SIGNATURE, name)
      t.equal(largeParses, 0, `${name}: the body was not parsed`)
      if (payload === nested) t.comment(`${name}: answered in ${Number(process.hrtime.bigint() - started) / 1e6} ms`)
    }
  }
})

t.test('signed bodies that are not JSON or not an event are still 400s', async (t) => {
  const cases: Array<[string, string, Record<string, unknown>]> = [
    ['malformed JSON', '{"id": "evt_1", "type": ', { success: false, error: 'Invalid JSON body', code: 'INVALID_JSON' }],
    ['an empty body', '', { success: false, error: 'Invalid JSON body', code: 'INVALID_JSON' }],
    ['a __proto__ key', '{"__proto__": {"polluted": true}}', { success: false, error: 'Invalid JSON body', code: 'INVALID_JSON' }],
    ['JSON of the wrong shape', '[{"id": "evt_1"}]', { success: false, error: 'Validation failed', code: 'VALIDATION_FAILED' }],
    ['an event without its fields', '{"id": "evt_1", "type": "invoice.payment_failed"}', { success: false, error: 'Validation failed', code: 'VALIDATION_FAILED' }]
  ]
  for (const [name, body, expected] of cases) {
    const res = await deliver(undefined, { body })
    t.equal(res.statusCode, 400, name)
    t.match(json(res), expected, name)
  }
})

t.test('a redelivered event is acknowledged and applied once, also when deliveries race', async (t) => {
  const user = await registerUser(app)
  stripe.reset()
  await app.inject({ method: 'POST', url: '/checkout', headers: user.auth, payload: { priceId: PRICE } })
  const { session } = stripe.completeCheckout([...stripe.checkoutSessions.keys()].at(-1)!)
  const event = checkoutSessionCompleted(session)
  const first = await deliver(event)
  const second = await deliver(event)
  t.same([first.statusCode, second.statusCode], [200, 200])
  t.same(json(second), { received: true })
  t.equal((await usageEvents(user.id, 'subscription_upgraded')).length, 1)

  const other = await registerUser(app)
  await app.inject({ method: 'POST', url: '/checkout', headers: other.auth, payload: { priceId: PRICE } })
  const { session: otherSession } = stripe.completeCheckout([...stripe.checkoutSessions.keys()].at(-1)!)
  const racing = checkoutSessionCompleted(otherSession)
  const answers = await Promise.all(Array.from({ length: 5 }, () => deliver(racing)))
  t.same(answers.map((r) => r.statusCode), [200, 200, 200, 200, 200])
  t.equal((await usageEvents(other.id, 'subscription_upgraded')).length, 1, 'applied exactly once')
  const { count } = await app.db.selectFrom('payment_events').select(sql<number>`count(*)::int`.as('count'))
    .where('id', '=', (racing as { id: string }).id).executeTakeFirstOrThrow()
  t.equal(count, 1)
})

t.test('a failure while applying records nothing, so the provider\'s retry applies the event', async (t) => {
  const user = await registerUser(app)
  await app.inject({ method: 'POST', url: '/checkout', headers: user.auth, payload: { priceId: PRICE } })
  const { session } = stripe.completeCheckout([...stripe.checkoutSessions.keys()].at(-1)!)
  const event = checkoutSessionCompleted(session)
  stripe.failNext(1, 'error') // the subscription look-up fails
  const failed = await deliver(event)
  t.ok(failed.statusCode >= 500, `answered ${failed.statusCode}`)
  t.equal(await eventRecorded(event.id), false, 'not marked done')
  t.equal((await preferencesRow(user.id)).plan, 'free')
  const retried = await deliver(event)
  t.equal(retried.statusCode, 200)
  t.match(await preferencesRow(user.id), { plan: 'pro', payment_subscription_status: 'active' })
  t.equal((await usageEvents(user.id, 'subscription_upgraded')).length, 1)
})

t.test('events arriving out of order leave the newest state', async (t) => {
  const user = await registerUser(app)
  const { subscription } = await subscribe(user)
  const start = now()
  const newerEnd = start + 90 * 24 * 3600
  const newer = subscriptionUpdated({
    ...subscription,
    status: 'active',
    cancel_at_period_end: true,
    items: { ...subscription.items, data: [{ ...subscription.items.data[0], current_period_end: newerEnd }] }
  }, { created: start + 100 })
  const older = invoicePaymentFailed(subscription, { created: start + 50 })
  t.equal((await deliver(newer)).statusCode, 200)
  t.equal((await deliver(older)).statusCode, 200, 'the late event is acknowledged')
  const data = json(await app.inject({ method: 'GET', url: '/subscription', headers: user.auth })).data
  t.match(data, { plan: 'pro', status: 'active', cancelAtPeriodEnd: true, currentPeriodEnd: new Date(newerEnd * 1000).toISOString() })
  t.ok(await eventRecorded((older as { id: string }).id), 'recorded, so a redelivery stays a no-op')
})

t.test('unknown customers and unhandled event types are acknowledged without changes', async (t) => {
  const stranger = subscriptionUpdated({ ...stripe.createSubscription({ customer: 'cus_nobody', price: PRICE }) })
  const res = await deliver(stranger)
  t.equal(res.statusCode, 200)
  t.same(json(res), { received: true })
  t.ok(await eventRecorded((stranger as { id: string }).id))
  const { count } = await app.db.selectFrom('user_preferences').select(sql<number>`count(*)::int`.as('count'))
    .where('payment_customer_id', '=', 'cus_nobody').executeTakeFirstOrThrow()
  t.equal(count, 0)

  const unhandled = makeEvent('customer.created', { id: 'cus_x', object: 'customer' })
  const ignored = await deliver(unhandled)
  t.equal(ignored.statusCode, 200)
  t.same(json(ignored), { received: true })
})

t.test('provider down or slow during checkout: 502 and nothing half-stored', async (t) => {
  for (const mode of ['error', 'timeout'] as const) {
    const user = await registerUser(app)
    stripe.failNext(1, mode)
    const res = await app.inject({ method: 'POST', url: '/checkout', headers: user.auth, payload: { priceId: PRICE } })
    t.equal(res.statusCode, 502, mode)
    t.same(json(res), { success: false, error: 'Payment provider error', code: 'PAYMENT_PROVIDER_ERROR' }, mode)
    t.equal((await preferencesRow(user.id)).payment_customer_id, null, `${mode}: no customer stored`)
  }
})

t.test('the price allowlist and the body are enforced before any provider call', async (t) => {
  const user = await registerUser(app)
  stripe.reset()
  for (const [payload, details] of [
    [{ priceId: 'price_free_lunch' }, ['Unknown price - priceId']],
    [{}, ['PriceId is required - priceId']],
    [{ priceId: PRICE, plan: 'pro' }, ['Unknown field - plan']]
  ] as const) {
    const res = await app.inject({ method: 'POST', url: '/checkout', headers: user.auth, payload })
    t.equal(res.statusCode, 400)
    t.same(json(res), { success: false, error: 'Validation failed', code: 'VALIDATION_FAILED', details })
  }
  t.same(stripe.calls, [], 'the provider was not called')
  const unauthenticated = await app.inject({ method: 'POST', url: '/checkout', payload: { priceId: PRICE } })
  t.equal(unauthenticated.statusCode, 401)
})

t.test('plan and payment fields cannot be written through /preferences', async (t) => {
  const user = await registerUser(app)
  for (const payload of [{ plan: 'pro' }, { paymentSubscriptionStatus: 'active' }, { paymentCustomerId: 'cus_mine' }]) {
    const res = await app.inject({ method: 'PATCH', url: '/preferences', headers: user.auth, payload })
    t.equal(res.statusCode, 400)
  }
  t.match(await preferencesRow(user.id), { plan: 'free', payment_subscription_status: null, payment_customer_id: null })
})

t.test('billing portal: 404 without a provider customer, the portal URL with one', async (t) => {
  const user = await registerUser(app)
  const none = await app.inject({ method: 'POST', url: '/billing-portal', headers: user.auth })
  t.equal(none.statusCode, 404)
  t.same(json(none), { success: false, error: 'No billing account', code: 'NO_STRIPE_CUSTOMER' })
  await subscribe(user)
  stripe.reset()
  const res = await app.inject({ method: 'POST', url: '/billing-portal', headers: user.auth })
  t.equal(res.statusCode, 200)
  t.match(json(res), { success: true, data: { url: /^https?:\/\// } })
  t.match(stripe.calls[0], { method: 'POST', path: '/v1/billing_portal/sessions', params: { customer: (await preferencesRow(user.id)).payment_customer_id, return_url: 'http://localhost:3000' } })
})

t.test('account deletion cancels a live subscription first; a provider failure deletes nothing', async (t) => {
  const user = await registerUser(app)
  const { subscription } = await subscribe(user)
  stripe.failNext(1, 'error')
  const failed = await app.inject({ method: 'DELETE', url: '/account/delete', headers: user.auth })
  t.equal(failed.statusCode, 502)
  t.same(json(failed), { success: false, error: 'Payment provider error', code: 'PAYMENT_PROVIDER_ERROR' })
  t.ok(await app.db.selectFrom('users').select('id').where('id', '=', user.id).executeTakeFirst(), 'the user is still there')

  const deleted = await app.inject({ method: 'DELETE', url: '/account/delete', headers: user.auth })
  t.equal(deleted.statusCode, 200)
  t.equal(stripe.subscriptions.get(subscription.id).status, 'canceled', 'cancelled immediately at the provider')
  t.equal(await app.db.selectFrom('users').select('id').where('id', '=', user.id).executeTakeFirst(), undefined)
})

t.test('without PAYMENT_SECRET_KEY the billing routes answer 503 and the rest runs', async (t) => {
  const bare = await build(t)
  const user = await registerUser(bare)
  for (const [method, url] of [['POST', '/checkout'], ['POST', '/billing-portal'], ['GET', '/subscription'], ['DELETE', '/subscription']] as const) {
    const res = await bare.inject({ method, url, headers: user.auth, ...(method === 'POST' && url === '/checkout' && { payload: { priceId: PRICE } }) })
    t.equal(res.statusCode, 503, `${method} ${url}`)
    t.same(json(res), { success: false, error: 'Billing is not configured', code: 'BILLING_NOT_CONFIGURED' })
  }
  const { body, headers } = signedDelivery(makeEvent('invoice.payment_failed', {}), WEBHOOK_SECRET)
  const webhook = await bare.inject({ method: 'POST', url: '/webhooks/payment', headers, payload: body })
  t.equal(webhook.statusCode, 503)
  t.equal((await bare.inject({ method: 'GET', url: '/tasks', headers: user.auth })).statusCode, 200)
})
