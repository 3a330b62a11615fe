// billing/rules.ts alone: whatever order the events of one subscription arrive in, the
// stored state ends the same (fast-check draws the events; every permutation is applied).
import assert from 'node:assert/strict'
import fc from 'fast-check'
import t from 'tap'
import { decideBillingEvent, planFor, type BillingEvent } from '../../billing/rules.js'
import type { BillingState } from '../../db/types.js'

const DAY = 86_400_000
const BASE = Date.parse('2026-11-24T00:00:00Z')
const END = BASE + 30 * DAY
const SUBSCRIPTION = 'sub_1Live'

const start: BillingState = {
  subscriptionId: SUBSCRIPTION,
  status: 'active',
  priceId: 'price_pro_monthly',
  currentPeriodEnd: new Date(END),
  cancelAtPeriodEnd: false,
  statusVersion: { at: new Date(BASE), precedence: 3 },
  periodEndVersion: { at: new Date(BASE), precedence: 3 },
  termsVersion: { at: new Date(BASE), precedence: 3 }
}

function apply (state: BillingState, event: BillingEvent): BillingState {
  const decision = decideBillingEvent(state, event)
  return decision.action === 'apply' ? decision.state : state
}

const fields = (state: BillingState) => ({
  plan: planFor(state.status),
  subscriptionId: state.subscriptionId,
  status: state.status,
  priceId: state.priceId,
  currentPeriodEnd: state.currentPeriodEnd?.toISOString() ?? null,
  cancelAtPeriodEnd: state.cancelAtPeriodEnd
})

function permutations<T> (items: T[]): T[][] {
  if (items.length <= 1) return [items]
  return items.flatMap((item, i) => permutations([...items.slice(0, i), ...items.slice(i + 1)]).map((rest) => [item, ...rest]))
}

// What Stripe sends for one live subscription within a few seconds: updates (the status,
// the period end, the terms may change), paid invoices for a later period, failed invoices,
// the deletion (one way to end; test/billing/billing-order.test.ts ends one by an update too).
const at = fc.integer({ min: 1, max: 3 }).map((seconds) => new Date(BASE + seconds * 1000))
const snapshot = (status: fc.Arbitrary<string>) => fc.record({
  id: fc.constant(SUBSCRIPTION),
  customerId: fc.constant('cus_1'),
  status,
  priceId: fc.constantFrom('price_pro_monthly', 'price_pro_yearly'),
  currentPeriodEnd: fc.constantFrom(END, END + 5 * DAY).map((ms) => new Date(ms)),
  cancelAtPeriodEnd: fc.boolean()
})
const event: fc.Arbitrary<BillingEvent> = fc.oneof(
  fc.record({ kind: fc.constant('subscription-updated' as const), at, subscription: snapshot(fc.constantFrom('active', 'past_due')) }),
  fc.record({ kind: fc.constant('subscription-deleted' as const), at, subscription: snapshot(fc.constant('canceled')) }),
  fc.record({ kind: fc.constant('checkout-completed' as const), at, subscription: snapshot(fc.constantFrom('active', 'past_due')) }),
  // A later paid invoice pays a later period.
  fc.integer({ min: 1, max: 3 }).map((seconds): BillingEvent => ({
    kind: 'invoice-paid', at: new Date(BASE + seconds * 1000), subscriptionId: SUBSCRIPTION, periodEnd: new Date(END + seconds * 30 * DAY)
  })),
  fc.record({ kind: fc.constant('invoice-failed' as const), at, subscriptionId: fc.constant(SUBSCRIPTION) })
)
// Two events of the same kind rank (precedence) in the same second have no order to find
// (the later delivery wins): one of each per second.
const rankOf = (e: BillingEvent) => `${e.at.getTime()}:${e.kind === 'checkout-completed' ? 'subscription-updated' : e.kind}`
// And a subscription ends once (a redelivered deletion has the same event id: never applied twice).
const events = fc.uniqueArray(event, { minLength: 2, maxLength: 4, selector: rankOf })
  .filter((drawn) => drawn.filter((e) => e.kind === 'subscription-deleted').length <= 1)

t.test('every delivery order of the same events ends in the same state', async (t) => {
  let runs = 0
  fc.assert(fc.property(events, (drawn) => {
    const [first, ...others] = permutations(drawn).map((order) => fields(order.reduce(apply, start)))
    for (const other of others) assert.deepEqual(other, first)
    runs++
  }), { numRuns: 500 })
  t.equal(runs, 500)
})

t.test('an ended subscription is final: the end applies however late, and nothing after it', async (t) => {
  const failedLater: BillingEvent = { kind: 'invoice-failed', at: new Date(BASE + 5000), subscriptionId: SUBSCRIPTION }
  const deletedEarlier: BillingEvent = {
    kind: 'subscription-deleted',
    at: new Date(BASE + 1000),
    subscription: { id: SUBSCRIPTION, customerId: 'cus_1', status: 'canceled', priceId: 'price_pro_monthly', currentPeriodEnd: new Date(END), cancelAtPeriodEnd: false }
  }
  const ended = [failedLater, deletedEarlier].reduce(apply, start)
  t.match(fields(ended), { plan: 'free', status: 'canceled' })
  t.same(decideBillingEvent(ended, failedLater), { action: 'ignore', because: 'ended' })
  t.same(decideBillingEvent(ended, { kind: 'invoice-paid', at: new Date(BASE + 9000), subscriptionId: SUBSCRIPTION, periodEnd: null }), { action: 'ignore', because: 'ended' })
})

t.test('invoices of another subscription, and subscription events of another while one is live, change nothing', async (t) => {
  const other = { id: 'sub_1Other', customerId: 'cus_1', status: 'active', priceId: 'price_pro_monthly', currentPeriodEnd: new Date(END), cancelAtPeriodEnd: false }
  const later = new Date(BASE + 9000)
  t.same(decideBillingEvent(start, { kind: 'invoice-failed', at: later, subscriptionId: other.id }), { action: 'ignore', because: 'other-subscription' })
  t.same(decideBillingEvent(start, { kind: 'subscription-updated', at: later, subscription: other }), { action: 'ignore', because: 'other-subscription' })
  const ended = { ...start, status: 'canceled' }
  t.match(decideBillingEvent(ended, { kind: 'subscription-updated', at: later, subscription: other }), { action: 'apply', state: { subscriptionId: other.id, status: 'active' } })
  t.same(decideBillingEvent(ended, { kind: 'subscription-updated', at: new Date(BASE - 1000), subscription: other }), { action: 'ignore', because: 'stale' },
    'an older event of another subscription does not replace an ended one')
})
