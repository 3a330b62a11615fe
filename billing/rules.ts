// What a provider event does to the stored subscription: pure rules, no SQL, no HTTP
// (billing/service.ts applies them).
// Stripe delivers events late, twice and in any order (its dunning sends the last failed
// invoice and the deletion in the same second, either way round); these rules make every
// delivery order of the same events end in the same state:
//
// 1. Ended is final. A subscription that is `canceled` or `incomplete_expired` stays so: no
//    event for that subscription id changes it. The event that ends it applies however late.
// 2. Newest wins, per group of fields. Status; period end; terms (price, cancel at period
//    end): each group keeps the provider `created` second of the event that last set it, and
//    only a newer event for the group changes it. Within one second, the higher precedence
//    wins (EVENT_PRECEDENCE: deletion > subscription update = completed checkout > failed
//    invoice > paid invoice); same second and precedence: the later delivery.
// 3. Invoices only nudge a live subscription, and only the stored one: paid moves `past_due`
//    to `active` and the period end forward; failed makes it `past_due`. They carry no terms.
// 4. One subscription at a time. Events of another subscription never replace a live stored
//    one, and a completed checkout of a second one that has not ended is to be cancelled at
//    the provider (the webhook does it: the user would be billed twice). When the stored
//    one is not live, a completed checkout links its subscription (its state is fetched from
//    the provider, so it is current), and a subscription event newer than the stored status
//    replaces it.
import type { BillingState, Version } from '../db/types.js'

/** Statuses in which the user has what they paid for. */
export const LIVE_STATUSES = ['active', 'trialing', 'past_due'] as const
/** Statuses a subscription never leaves. */
export const ENDED_STATUSES = ['canceled', 'incomplete_expired'] as const

export const isLive = (status: string | null): boolean => (LIVE_STATUSES as readonly string[]).includes(status ?? '')
export const isEnded = (status: string | null): boolean => (ENDED_STATUSES as readonly string[]).includes(status ?? '')
/** Plan is `pro` while the subscription is live, else `free`. */
export const planFor = (status: string | null): 'pro' | 'free' => isLive(status) ? 'pro' : 'free'

/** A subscription as the provider describes it at one moment (billing/stripe-events.ts maps Stripe's). */
export interface ProviderSubscription {
  id: string
  customerId: string
  status: string
  priceId: string | null
  currentPeriodEnd: Date | null
  cancelAtPeriodEnd: boolean
}

/** A provider event, in our terms; `at` is the provider's `created` time. */
export type BillingEvent =
  | { kind: 'checkout-completed' | 'subscription-updated' | 'subscription-deleted', at: Date, subscription: ProviderSubscription }
  | { kind: 'invoice-paid', at: Date, subscriptionId: string, periodEnd: Date | null }
  | { kind: 'invoice-failed', at: Date, subscriptionId: string }

/** Which of two events of the same second wins. */
export const EVENT_PRECEDENCE: Record<BillingEvent['kind'], number> = {
  'invoice-paid': 1,
  'invoice-failed': 2,
  'subscription-updated': 3,
  'checkout-completed': 3,
  'subscription-deleted': 4
}

export type IgnoredBecause =
  /** Older than what is stored for every group it carries. */
  | 'stale'
  /** For a subscription that has ended. */
  | 'ended'
  /** For another subscription than the stored one (an invoice, or while the stored one is live). */
  | 'other-subscription'
  /** An invoice for a stored subscription that is not live. */
  | 'not-live'

export type Decision =
  /** `replaces`: a stored subscription a checkout's new one takes the place of before it ended (not live: unpaid, paused, incomplete), to stop billing. */
  | { action: 'apply', state: BillingState, replaces?: string }
  | { action: 'ignore', because: IgnoredBecause }
  /** A checkout completed a second subscription while one is live: stop billing the second. */
  | { action: 'cancel-second-subscription', subscriptionId: string }

const versionOf = (event: BillingEvent): Version => ({ at: event.at, precedence: EVENT_PRECEDENCE[event.kind] })

/** Whether `version` may overwrite what `stored` set: later, or the same second and at least the precedence. */
export function isNewer (version: Version, stored: Version | null): boolean {
  if (stored === null) return true
  const difference = version.at.getTime() - stored.at.getTime()
  return difference > 0 || (difference === 0 && version.precedence >= stored.precedence)
}

const newest = (stored: Version | null, version: Version): Version => isNewer(version, stored) ? version : stored ?? version
const ignore = (because: IgnoredBecause): Decision => ({ action: 'ignore', because })
const subscriptionIdOf = (event: BillingEvent): string => 'subscription' in event ? event.subscription.id : event.subscriptionId

/** The stored state after `event`, or why it changes nothing. */
export function decideBillingEvent (stored: BillingState, event: BillingEvent): Decision {
  if (subscriptionIdOf(event) !== stored.subscriptionId) return otherSubscription(stored, event)
  if (isEnded(stored.status)) return ignore('ended')
  return 'subscription' in event ? subscriptionEvent(stored, event) : invoiceEvent(stored, event)
}

function otherSubscription (stored: BillingState, event: BillingEvent): Decision {
  if (!('subscription' in event)) return ignore('other-subscription')
  if (stored.subscriptionId !== null && isLive(stored.status)) {
    return event.kind === 'checkout-completed' && !isEnded(event.subscription.status)
      ? { action: 'cancel-second-subscription', subscriptionId: event.subscription.id }
      : ignore('other-subscription')
  }
  // A checkout's state was fetched when it was applied: current, whatever its event's time.
  if (event.kind !== 'checkout-completed' && !isNewer(versionOf(event), stored.statusVersion)) return ignore('stale')
  const version = versionOf(event)
  const state = { ...fieldsOf(event.subscription), statusVersion: version, periodEndVersion: version, termsVersion: version }
  // The stored one, not live but not ended either, still exists at the provider, and could be
  // paid again (an unpaid invoice settled) and bill beside the new one, whose events alone count
  // from now on: it is cancelled.
  const replaces = event.kind === 'checkout-completed' && stored.subscriptionId !== null && !isEnded(stored.status) ? stored.subscriptionId : undefined
  return { action: 'apply', state, ...(replaces !== undefined && { replaces }) }
}

function subscriptionEvent (stored: BillingState, event: Extract<BillingEvent, { subscription: ProviderSubscription }>): Decision {
  const version = versionOf(event)
  const snapshot = event.subscription
  if (isEnded(snapshot.status)) {
    // The end of the subscription: final, however late it comes.
    return {
      action: 'apply',
      state: {
        ...fieldsOf(snapshot),
        statusVersion: newest(stored.statusVersion, version),
        periodEndVersion: newest(stored.periodEndVersion, version),
        termsVersion: newest(stored.termsVersion, version)
      }
    }
  }
  const state = { ...stored }
  if (isNewer(version, stored.statusVersion)) Object.assign(state, { status: snapshot.status, statusVersion: version })
  if (isNewer(version, stored.periodEndVersion)) Object.assign(state, { currentPeriodEnd: snapshot.currentPeriodEnd, periodEndVersion: version })
  if (isNewer(version, stored.termsVersion)) {
    Object.assign(state, { priceId: snapshot.priceId, cancelAtPeriodEnd: snapshot.cancelAtPeriodEnd, termsVersion: version })
  }
  return state.statusVersion === version || state.periodEndVersion === version || state.termsVersion === version
    ? { action: 'apply', state }
    : ignore('stale')
}

function invoiceEvent (stored: BillingState, event: Extract<BillingEvent, { subscriptionId: string }>): Decision {
  if (!isLive(stored.status)) return ignore('not-live')
  const version = versionOf(event)
  const state = { ...stored }
  if (isNewer(version, stored.statusVersion)) {
    const status = event.kind === 'invoice-failed' ? 'past_due' : stored.status === 'past_due' ? 'active' : stored.status
    Object.assign(state, { status, statusVersion: version })
  }
  if (event.kind === 'invoice-paid' && event.periodEnd !== null && isNewer(version, stored.periodEndVersion)) {
    const forward = stored.currentPeriodEnd === null || event.periodEnd > stored.currentPeriodEnd
    Object.assign(state, { currentPeriodEnd: forward ? event.periodEnd : stored.currentPeriodEnd, periodEndVersion: version })
  }
  return state.statusVersion === version || state.periodEndVersion === version ? { action: 'apply', state } : ignore('stale')
}

function fieldsOf (snapshot: ProviderSubscription) {
  return {
    subscriptionId: snapshot.id,
    status: snapshot.status,
    priceId: snapshot.priceId,
    currentPeriodEnd: snapshot.currentPeriodEnd,
    cancelAtPeriodEnd: snapshot.cancelAtPeriodEnd
  }
}
