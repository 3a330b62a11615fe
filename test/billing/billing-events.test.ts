// billing/stripe-events.ts alone: what each provider event means for us, the one mapping of a
// Stripe subscription, and the shape check of a signed event. No server, no database.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import type Stripe from 'stripe'
import t from 'tap'
import { HANDLED_EVENT_TYPES } from '../../billing/stripe-event-types.js'
import { fromStripeSubscription, isHandled, meaningOf, readProviderEvent, toProviderEvent } from '../../billing/stripe-events.js'
import { PROJECT_ROOT } from '../support/paths.js'
import { checkoutSessionCompleted, invoicePaymentFailed, invoicePaymentSucceeded, makeEvent, subscriptionDeleted, subscriptionUpdated } from '../support/stripe-events.js'

const CREATED = 1_790_000_000
const PERIOD_END = CREATED + 30 * 86_400
const USER = '0b6f4c64-8f0e-4c2a-9a53-1f2e3d4c5b6a'

const subscription = {
  id: 'sub_1Example',
  object: 'subscription',
  customer: 'cus_Example',
  status: 'active',
  cancel_at_period_end: false,
  currency: 'usd',
  items: { object: 'list', data: [{ id: 'si_1', price: { id: 'price_pro_monthly', product: 'prod_1', unit_amount: 1000, currency: 'usd' }, quantity: 1, current_period_start: CREATED, current_period_end: PERIOD_END }] }
}
const asEvent = (event: unknown) => readProviderEvent(JSON.parse(JSON.stringify(event)))

t.test('a Stripe subscription, as we keep it (the period from its first item)', async (t) => {
  t.same(fromStripeSubscription(subscription as unknown as Stripe.Subscription), {
    id: 'sub_1Example', customerId: 'cus_Example', status: 'active', priceId: 'price_pro_monthly', currentPeriodEnd: new Date(PERIOD_END * 1000), cancelAtPeriodEnd: false
  })
  t.match(fromStripeSubscription({ ...subscription, customer: { id: 'cus_Expanded' }, items: { data: [] } } as unknown as Stripe.Subscription),
    { customerId: 'cus_Expanded', priceId: null, currentPeriodEnd: null }, 'an expanded customer; no items')
})

t.test('checkout.session.completed: the user it names and the subscription to fetch', async (t) => {
  const session = { id: 'cs_test_1', object: 'checkout.session', mode: 'subscription', client_reference_id: USER, customer: 'cus_Example', subscription: 'sub_1Example', status: 'complete' }
  t.same(meaningOf(asEvent(checkoutSessionCompleted(session, { created: CREATED }))), {
    kind: 'checkout', at: new Date(CREATED * 1000), userId: USER, subscriptionId: 'sub_1Example', customerId: 'cus_Example', checkoutSessionId: 'cs_test_1'
  })
  const fromMetadata = meaningOf(asEvent(checkoutSessionCompleted({ ...session, client_reference_id: null, metadata: { userId: USER } }, { created: CREATED })))
  t.match(fromMetadata, { kind: 'checkout', userId: USER }, 'the user from the metadata when there is no reference')
  t.match(meaningOf(asEvent(checkoutSessionCompleted({ ...session, mode: 'payment' }))), { kind: 'nothing' }, 'a one-off payment')
  t.match(meaningOf(asEvent(checkoutSessionCompleted({ ...session, subscription: null }))), { kind: 'nothing' })
})

t.test('subscription updated and deleted: the provider customer, the subscription as sent', async (t) => {
  const at = new Date(CREATED * 1000)
  const kept = fromStripeSubscription(subscription as unknown as Stripe.Subscription)
  t.same(meaningOf(asEvent(subscriptionUpdated({ ...subscription, status: 'past_due', cancel_at_period_end: true }, { created: CREATED }))), {
    kind: 'apply', target: { customerId: 'cus_Example' }, event: { kind: 'subscription-updated', at, subscription: { ...kept, status: 'past_due', cancelAtPeriodEnd: true } }
  })
  t.same(meaningOf(asEvent(subscriptionDeleted({ ...subscription, cancel_at_period_end: true }, { created: CREATED }))), {
    kind: 'apply', target: { customerId: 'cus_Example' }, event: { kind: 'subscription-deleted', at, subscription: { ...kept, status: 'canceled', cancelAtPeriodEnd: false } }
  }, 'a deletion ends it: canceled, nothing left to cancel at period end')
})

t.test('invoices: the subscription they pay, the period a paid one pays for', async (t) => {
  t.same(meaningOf(asEvent(invoicePaymentSucceeded(subscription, { created: CREATED, periodEnd: PERIOD_END + 86_400 }))), {
    kind: 'apply', target: { customerId: 'cus_Example' }, event: { kind: 'invoice-paid', at: new Date(CREATED * 1000), subscriptionId: 'sub_1Example', periodEnd: new Date((PERIOD_END + 86_400) * 1000) }
  })
  t.same(meaningOf(asEvent(invoicePaymentFailed(subscription, { created: CREATED }))), {
    kind: 'apply', target: { customerId: 'cus_Example' }, event: { kind: 'invoice-failed', at: new Date(CREATED * 1000), subscriptionId: 'sub_1Example' }
  })
  const orphan = invoicePaymentFailed(subscription) as any
  orphan.data.object.parent = null
  t.match(meaningOf(asEvent(orphan)), { kind: 'nothing' }, 'an invoice of no subscription')
})

t.test('other event types are not handled; badly shaped events are refused', async (t) => {
  const other = asEvent(makeEvent('customer.created', { id: 'cus_1', object: 'customer' }))
  t.equal(isHandled(other), false)
  t.match(meaningOf(other), { kind: 'nothing' })
  t.equal(isHandled(asEvent(subscriptionUpdated(subscription))), true)
  for (const [label, body] of [
    ['not an object', 'event'],
    ['no id', { type: 'customer.subscription.updated', created: CREATED, data: { object: {} } }],
    ['a type that is not a string', { id: 'evt_1', type: { deep: true }, created: CREATED, data: { object: {} } }],
    ['a handled type with the wrong object', { id: 'evt_1', type: 'customer.subscription.updated', created: CREATED, data: { object: { id: 'sub_1' } } }]
  ] as const) {
    t.throws(() => readProviderEvent(body), { code: 'VALIDATION_FAILED', details: ['Not a well-formed provider event - body'] }, label)
  }
})

t.test('an event of ours: id, type, time, and its meaning (none for a type not handled)', async (t) => {
  const event = subscriptionUpdated(subscription, { created: CREATED })
  t.same(toProviderEvent(JSON.parse(JSON.stringify(event))), {
    id: event.id, type: 'customer.subscription.updated', created: new Date(CREATED * 1000), meaning: meaningOf(asEvent(event))
  })
  t.match(toProviderEvent(JSON.parse(JSON.stringify(makeEvent('customer.created', { id: 'cus_1', object: 'customer' })))), { type: 'customer.created', meaning: null })
  t.match(toProviderEvent(JSON.parse(JSON.stringify(makeEvent('toString', {})))), { meaning: null }, 'a type named like a prototype member is not handled')
})

t.test('docs/billing.md names exactly the handled event types (HANDLED_EVENT_TYPES is the one list)', async (t) => {
  const doc = readFileSync(join(PROJECT_ROOT, 'docs', 'billing.md'), 'utf8')
  const cliEvents = /--events ([\w.,]+)/.exec(doc)?.[1]?.split(',')
  t.same(cliEvents, HANDLED_EVENT_TYPES, 'the `stripe listen --events` line')
  const tableEvents = [...doc.matchAll(/^\| `([a-z_]+(?:\.[a-z_]+)+)` \|/gm)].map((match) => match[1])
  t.same(tableEvents, HANDLED_EVENT_TYPES, 'the table of what each event does')
})
