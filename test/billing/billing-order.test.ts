// Webhook events that race: every pair of events for one subscription, delivered in either
// order, in the same second or a second apart, ends in one stored state; a cancelled
// subscription never comes back; events of another subscription never overwrite a live one.
import t from 'tap'
import { billingSetup, PRICE } from '../support/billing-setup.js'
import { json } from '../support/helper.js'
import {
  checkoutSessionCompleted, invoicePaymentFailed, invoicePaymentSucceeded,
  subscriptionDeleted, subscriptionUpdated, type StripeEventLike
} from '../support/stripe-events.js'

const DAY = 86_400

const setup = await billingSetup(t)
const { app, stripe } = setup
const newUser = () => setup.newUser('order')
/** Checkout through the API; the stand-in completes it; checkout.session.completed dated `created`. */
const subscribe = (user: User, created: number) => setup.subscribe(user, { created })

const now = () => Math.floor(Date.now() / 1000)
const iso = (seconds: number) => new Date(seconds * 1000).toISOString()

async function deliver (event: StripeEventLike) {
  const res = await setup.deliver(event)
  if (res.statusCode !== 200) throw new Error(`webhook ${event.type} answered ${res.statusCode} ${res.body}`)
}

type User = Awaited<ReturnType<typeof newUser>>

async function stored (user: User) {
  const row = await setup.stored(user)
  return {
    plan: row.plan,
    status: row.payment_subscription_status,
    subscriptionId: row.payment_subscription_id,
    priceId: row.payment_price_id,
    currentPeriodEnd: row.payment_current_period_end,
    cancelAtPeriodEnd: row.cancel_at_period_end
  }
}

async function answered (user: User) {
  const res = await app.inject({ method: 'GET', url: '/subscription', headers: user.auth })
  const { plan, status, subscriptionId, priceId, currentPeriodEnd, cancelAtPeriodEnd } = json(res).data
  return { plan, status, subscriptionId, priceId, currentPeriodEnd, cancelAtPeriodEnd }
}

const withPeriodEnd = (subscription: any, end: number) =>
  ({ ...subscription, items: { ...subscription.items, data: [{ ...subscription.items.data[0], current_period_end: end }] } })

// The events of a pair, for a subscription whose current period ends at `end`:
// - updated(s): the subscription now in status s, cancelling at period end, period end 5 days later;
// - paid: the invoice of the next period (its end 30 days later) paid;
// - failed: an invoice payment failed;
// - deleted: the subscription ended (Stripe's deletion event).
type Kind = 'deleted' | 'failed' | 'paid' | 'updated(active)' | 'updated(past_due)'
function makeEvent (kind: Kind, subscription: any, created: number): StripeEventLike {
  const end = subscription.items.data[0].current_period_end as number
  switch (kind) {
    case 'deleted': return subscriptionDeleted(subscription, { created })
    case 'failed': return invoicePaymentFailed(subscription, { created })
    case 'paid': return invoicePaymentSucceeded(subscription, { created, periodEnd: end + 30 * DAY })
    case 'updated(active)':
    case 'updated(past_due)':
      return subscriptionUpdated({
        ...withPeriodEnd(subscription, end + 5 * DAY),
        status: kind === 'updated(active)' ? 'active' : 'past_due',
        cancel_at_period_end: true
      }, { created })
  }
}

type Timing = 'same second' | 'second one a second later' | 'first one a second later'
const OFFSETS: Record<Timing, [number, number]> = {
  'same second': [0, 0],
  'second one a second later': [0, 1],
  'first one a second later': [1, 0]
}
/** The state every delivery order must end in; period ends in days after the subscription's. */
interface Expected { status: string, cancelAtPeriodEnd: boolean, periodEndDays: number }
const ENDED: Expected = { status: 'canceled', cancelAtPeriodEnd: false, periodEndDays: 0 }
const CASES: Array<{ pair: [Kind, Kind], expected: Record<Timing, Expected> }> = [
  // A deletion ends the subscription whatever comes with it, before or after.
  { pair: ['deleted', 'failed'], expected: { 'same second': ENDED, 'second one a second later': ENDED, 'first one a second later': ENDED } },
  { pair: ['deleted', 'paid'], expected: { 'same second': ENDED, 'second one a second later': ENDED, 'first one a second later': ENDED } },
  { pair: ['deleted', 'updated(active)'], expected: { 'same second': ENDED, 'second one a second later': ENDED, 'first one a second later': ENDED } },
  // Same second: the subscription's own state outranks an invoice's; a second apart, the
  // newer sets the status, and the update's terms and period end hold either way.
  {
    pair: ['failed', 'updated(active)'],
    expected: {
      'same second': { status: 'active', cancelAtPeriodEnd: true, periodEndDays: 5 },
      'second one a second later': { status: 'active', cancelAtPeriodEnd: true, periodEndDays: 5 },
      'first one a second later': { status: 'past_due', cancelAtPeriodEnd: true, periodEndDays: 5 }
    }
  },
  {
    pair: ['paid', 'updated(past_due)'],
    expected: {
      'same second': { status: 'past_due', cancelAtPeriodEnd: true, periodEndDays: 5 },
      'second one a second later': { status: 'past_due', cancelAtPeriodEnd: true, periodEndDays: 5 },
      'first one a second later': { status: 'active', cancelAtPeriodEnd: true, periodEndDays: 30 }
    }
  },
  // Two invoices in one second: the failure outranks the payment for the status; the paid
  // period's end holds either way.
  {
    pair: ['failed', 'paid'],
    expected: {
      'same second': { status: 'past_due', cancelAtPeriodEnd: false, periodEndDays: 30 },
      'second one a second later': { status: 'active', cancelAtPeriodEnd: false, periodEndDays: 30 },
      'first one a second later': { status: 'past_due', cancelAtPeriodEnd: false, periodEndDays: 30 }
    }
  }
]

for (const { pair, expected } of CASES) {
  t.test(`${pair[0]} + ${pair[1]}: one final state whatever the order`, async (t) => {
    for (const timing of Object.keys(OFFSETS) as Timing[]) {
      const outcomes = []
      for (const order of [[0, 1], [1, 0]] as const) {
        const user = await newUser()
        const start = now()
        const { subscription } = await subscribe(user, start)
        const end = subscription.items.data[0].current_period_end as number
        const at = start + 10
        const events = pair.map((kind, i) => makeEvent(kind, subscription, at + OFFSETS[timing][i]!))
        for (const i of order) await deliver(events[i]!)
        const name = `${timing}, delivered ${order.map((i) => pair[i]).join(' then ')}`
        const want = expected[timing]
        const state = {
          plan: ['active', 'trialing', 'past_due'].includes(want.status) ? 'pro' : 'free',
          status: want.status,
          subscriptionId: subscription.id,
          priceId: PRICE,
          currentPeriodEnd: iso(end + want.periodEndDays * DAY),
          cancelAtPeriodEnd: want.cancelAtPeriodEnd
        }
        t.same(await stored(user), state, `${name}: the stored row`)
        t.same(await answered(user), state, `${name}: GET /subscription`)
        // Each order has a subscription of its own: compare the period end as days past its own.
        const { subscriptionId, currentPeriodEnd, ...rest } = await stored(user)
        outcomes.push({ ...rest, periodEndDays: (Date.parse(String(currentPeriodEnd)) / 1000 - end) / DAY })
      }
      t.same(outcomes[0], outcomes[1], `${timing}: both orders end alike`)
    }
  })
}

t.test('a cancelled subscription stays cancelled: later events of it change nothing', async (t) => {
  for (const ending of ['deleted', 'updated to incomplete_expired'] as const) {
    const user = await newUser()
    const start = now()
    const { session, subscription } = await subscribe(user, start)
    const ended = ending === 'deleted'
      ? subscriptionDeleted(subscription, { created: start + 10 })
      : subscriptionUpdated({ ...subscription, status: 'incomplete_expired' }, { created: start + 10 })
    await deliver(ended)
    const after = await stored(user)
    t.equal(after.plan, 'free', ending)
    for (const late of [
      invoicePaymentSucceeded(subscription, { created: start + 20 }),
      invoicePaymentFailed(subscription, { created: start + 30 }),
      subscriptionUpdated({ ...subscription, status: 'active' }, { created: start + 40 }),
      checkoutSessionCompleted(session, { created: start + 50 })
    ]) {
      await deliver(late)
      t.same(await stored(user), after, `${ending}, then ${late.type} a little later: unchanged`)
    }
    t.match(await answered(user), { plan: 'free', status: after.status }, `${ending}: GET /subscription`)
  }
})

t.test('events of another subscription of the customer never overwrite a live one', async (t) => {
  const user = await newUser()
  const start = now()
  const { subscription: old } = await subscribe(user, start)
  await deliver(subscriptionDeleted(old, { created: start + 10 }))
  const { subscription: current } = await subscribe(user, start + 20)
  const live = await stored(user)
  t.match(live, { plan: 'pro', status: 'active', subscriptionId: current.id })
  for (const late of [
    invoicePaymentFailed(old, { created: start + 30 }),
    invoicePaymentSucceeded(old, { created: start + 40, periodEnd: start + 400 * DAY }),
    subscriptionUpdated({ ...old, status: 'active' }, { created: start + 50 }),
    subscriptionDeleted(old, { created: start + 60 })
  ]) {
    await deliver(late)
    t.same(await stored(user), live, `${late.type} of the old subscription: the live one stays`)
  }
  // An invoice of the stored subscription still counts.
  await deliver(invoicePaymentFailed(current, { created: start + 70 }))
  t.match(await stored(user), { status: 'past_due', subscriptionId: current.id })
})

t.test('an invoice before the subscription is linked does not link it; a paid invoice does not end a trial', async (t) => {
  const user = await newUser()
  const start = now()
  const res = await app.inject({ method: 'POST', url: '/checkout', headers: user.auth, payload: { priceId: PRICE } })
  const { session, subscription } = stripe.completeCheckout(res.json().data.sessionId)
  await deliver(invoicePaymentSucceeded(subscription, { created: start }))
  t.match(await stored(user), { plan: 'free', status: null, subscriptionId: null }, 'the invoice alone links nothing')
  await deliver(checkoutSessionCompleted(session, { created: start }))
  t.match(await stored(user), { plan: 'pro', status: 'active', subscriptionId: subscription.id }, 'the checkout links it')

  await deliver(subscriptionUpdated({ ...subscription, status: 'trialing' }, { created: start + 10 }))
  await deliver(invoicePaymentSucceeded(subscription, { created: start + 20 }))
  t.match(await stored(user), { plan: 'pro', status: 'trialing' }, 'still trialing after a paid ($0) invoice')
  await deliver(invoicePaymentFailed(subscription, { created: start + 30 }))
  await deliver(invoicePaymentSucceeded(subscription, { created: start + 40 }))
  t.match(await stored(user), { plan: 'pro', status: 'active' }, 'past_due, then paid: active')
})

t.test('a cancel the provider answers after the subscription ended meanwhile leaves it ended (its answer is no newer than the deletion)', async (t) => {
  const user = await newUser()
  const start = now()
  const { subscription } = await subscribe(user, start)
  const held = stripe.holdNext({ method: 'POST', path: `/v1/subscriptions/${subscription.id}` })
  const cancel = app.inject({ method: 'DELETE', url: '/subscription', headers: user.auth })
  await held.arrived
  // While the provider's answer is on its way, the subscription ends: cancelled at once in the
  // billing portal, or its last payment retry failed.
  await deliver(subscriptionDeleted({ ...subscription, status: 'canceled' }, { created: start + 10 }))
  held.release()
  const answer = await cancel
  t.equal(answer.statusCode, 200)
  t.match(answer.json().data, { plan: 'free', cancelAtPeriodEnd: false }, 'it answers what is stored')
  t.match(await stored(user), { plan: 'free', status: 'canceled', subscriptionId: subscription.id, cancelAtPeriodEnd: false }, 'the deletion stands')
  t.equal((await app.inject({ method: 'POST', url: '/checkout', headers: user.auth, payload: { priceId: PRICE } })).statusCode, 200, 'and a new subscription can be bought')
})
