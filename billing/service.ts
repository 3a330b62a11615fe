// Billing, as the routes ask for it (fastify.billing, plugins/app/billing.ts): provider events
// applied exactly once, checkout, the portal, cancellation, and closing an account's billing.
// It decides: what an event does to the stored state (billing/rules.ts), what the provider
// must do; the provider (billing/provider.ts) and the repositories (db/billing.ts) carry it
// out, and routes stay HTTP only. No Fastify, no SDK types here. No provider call runs inside
// a database transaction: one a webhook decides on is queued in the transaction and carried
// out after it commits (billing/provider-actions.ts).
import type { Kysely } from 'kysely'
import {
  forgetCheckoutSession, hasBillingRecord, isPaymentEventRecorded, linkCustomer, lockBillingState, queueProviderAction,
  recordPaymentEvent, replaceOpenCheckoutSession, storeBillingState, storeCancelAtPeriodEnd, toStoredSubscription
} from '../db/billing.js'
import { getPreferences } from '../db/preferences.js'
import type { Database, ProviderActionReason, SubscriptionTarget } from '../db/types.js'
import { recordUsageEvent } from '../db/usage-events.js'
import type { Subscription } from '../schemas/billing.js'
import { NoActiveSubscriptionError, NoBillingAccountError, PaymentProviderError, SubscriptionAlreadyActiveError } from '../errors.js'
import type { BillingLog, PaymentProvider, ProviderEvent } from './provider.js'
import { decideBillingEvent, isEnded, isLive, LIVE_STATUSES, planFor, type BillingEvent, type IgnoredBecause } from './rules.js'

/**
 * What became of a provider event: it changed our state (or decided to cancel a subscription
 * nobody may be billed for), it changed nothing (a type we do not handle, an unknown customer,
 * an older state than the stored one), or it had been applied before.
 */
export type EventOutcome = 'applied' | 'ignored' | 'duplicate'

export interface BillingService {
  /** Throws 503 `Billing is not configured` unless it is. */
  ensureConfigured: () => void
  /** The prices a checkout may name (PAYMENT_PRICE_IDS). */
  priceIds: readonly string[]
  /** A webhook delivery's raw body once its signature holds (400 `Invalid signature` otherwise). */
  verifyWebhook: (rawBody: unknown, signatureHeader: unknown) => Promise<Buffer>
  /** A verified body, parsed, as an event (400 when it is not shaped like one). */
  readWebhookEvent: (body: unknown) => Promise<ProviderEvent>
  applyProviderEvent: (event: ProviderEvent, log: BillingLog) => Promise<EventOutcome>
  startCheckout: (
    user: { id: string, email: string },
    session: { priceId: string, successUrl: string, cancelUrl: string, idempotencyKey?: string },
    log: BillingLog
  ) => Promise<{ url: string, sessionId: string }>
  openBillingPortal: (userId: string, options?: { idempotencyKey?: string }) => Promise<string>
  storedSubscription: (userId: string) => Promise<Subscription>
  cancelAtPeriodEnd: (userId: string) => Promise<Subscription>
  closeBillingAccount: (userId: string) => Promise<void>
}

export interface BillingServiceOptions {
  db: Kysely<Database>
  provider: PaymentProvider
  priceIds: readonly string[]
  /** Told after a commit that queued a provider action, so it is carried out at once. */
  providerActions: { wake: () => void }
}

interface Planned { target: SubscriptionTarget, event: BillingEvent, checkoutSessionId: string | null }
interface Applied { outcome: EventOutcome, queued: boolean }

/** What an event did to the stored subscription of the user it targets. */
type ApplyResult =
  | { outcome: 'applied', userId: string, plan: string, replaced?: string }
  | { outcome: 'ignored', because: IgnoredBecause }
  | { outcome: 'second-subscription', userId: string, subscriptionId: string }
  | { outcome: 'unknown' }

// Every account has its preferences row; this is the one read of it here.
const billingRecordOf = (db: Kysely<Database>, userId: string) => getPreferences(db, userId)

export function createBillingService ({ db, provider, priceIds, providerActions }: BillingServiceOptions): BillingService {
  /**
   * Applies a provider event whose signature and shape were checked: once (its id is recorded
   * in the transaction of its effect, so a redelivery, or two racing on two instances, changes
   * nothing more), in any order (billing/rules.ts). A failure records nothing, so the
   * provider's retry applies it later. A provider call the event needs is queued in that
   * transaction and made after it commits: the event is done once recorded, whatever the
   * provider then takes.
   */
  async function applyProviderEvent (event: ProviderEvent, log: BillingLog): Promise<EventOutcome> {
    const { meaning } = event
    if (meaning === null) {
      log.info('webhook event type not handled: ignored')
      return 'ignored'
    }
    // Cheap early exit for redeliveries; the insert below is what settles a race.
    if (await isPaymentEventRecorded(db, event.id)) {
      log.info('webhook event already applied')
      return 'duplicate'
    }
    let planned: Planned | null = null
    if (meaning.kind === 'apply') {
      planned = { target: meaning.target, event: meaning.event, checkoutSessionId: null }
    } else if (meaning.kind === 'checkout') {
      const subscription = await provider.retrieveSubscription(meaning.subscriptionId)
      if (subscription === null) {
        // A subscription the provider does not have: for a live account, a wrong key or mode is
        // likelier than a loss, so the event is left for the provider's retry; for an account
        // that is gone there is nothing to link and nothing to cancel.
        if (await hasBillingRecord(db, meaning.userId)) {
          log.error({ userId: meaning.userId, subscriptionId: meaning.subscriptionId }, 'checkout completed for a subscription the provider does not have: not applied')
          throw new PaymentProviderError()
        }
        log.warn({ subscriptionId: meaning.subscriptionId }, 'checkout completed for an account that no longer exists, and the provider no longer has its subscription: recorded, nothing to do')
      } else {
        planned = {
          target: { userId: meaning.userId },
          event: { kind: 'checkout-completed', at: meaning.at, subscription: { ...subscription, customerId: meaning.customerId ?? subscription.customerId } },
          checkoutSessionId: meaning.checkoutSessionId
        }
      }
    } else {
      log.warn({ why: meaning.why }, 'webhook event with nothing to apply: recorded')
    }
    const { outcome, queued } = await db.transaction().execute(async (tx): Promise<Applied> => {
      if (!await recordPaymentEvent(tx, { id: event.id, type: event.type, created: event.created })) return { outcome: 'duplicate', queued: false }
      return planned === null ? { outcome: 'ignored', queued: false } : applyPlanned(tx, log, planned, event.id)
    })
    if (queued) providerActions.wake()
    return outcome
  }

  return {
    ensureConfigured: () => provider.ensureConfigured(),
    priceIds,
    verifyWebhook: (rawBody, signatureHeader) => provider.verifyWebhook(rawBody, signatureHeader),
    readWebhookEvent: (body) => provider.readWebhookEvent(body),
    applyProviderEvent,

    /**
     * A hosted checkout for the user, on a price already checked: 409 while a subscription is
     * live. The provider customer is created once and stored before the session. Of the user's
     * checkouts only the newest can be paid: the one it replaces (opened earlier, or by a
     * concurrent request) is expired. Should that fail, the new session still stands: the
     * webhook cancels a second subscription if the old one is paid after all. With an
     * `idempotencyKey` (a retried request's), the provider answers a repeat with the session it
     * opened the first time, which is then the stored one already and stays open.
     */
    async startCheckout (user, session, log) {
      provider.ensureConfigured()
      const record = await billingRecordOf(db, user.id)
      if (isLive(record.payment_subscription_status)) throw new SubscriptionAlreadyActiveError()
      const customerId = record.payment_customer_id ??
        await linkCustomer(db, user.id, await provider.createCustomer({ id: user.id, email: user.email }))
      const opened = await provider.createCheckoutSession({ customerId, userId: user.id, ...session })
      const previous = await replaceOpenCheckoutSession(db, user.id, opened.sessionId)
      if (previous !== null && previous !== opened.sessionId) {
        await provider.expireCheckoutSession(previous).catch((err: unknown) => {
          log.warn({ err, checkoutSessionId: previous }, 'could not expire the previous checkout session')
        })
      }
      return opened
    },

    /**
     * The provider's billing portal for the user; 404 before they have a provider customer. With
     * an `idempotencyKey` (a retried request's), a repeat gets the same portal session.
     */
    async openBillingPortal (userId, options = {}) {
      provider.ensureConfigured()
      const { payment_customer_id: customerId } = await billingRecordOf(db, userId)
      if (customerId === null) throw new NoBillingAccountError()
      return provider.createPortalSession(customerId, options)
    },

    /** The stored subscription (the webhooks keep it current); no provider call. */
    async storedSubscription (userId) {
      provider.ensureConfigured()
      return toStoredSubscription(await billingRecordOf(db, userId))
    },

    /** Cancels at the end of the paid period; 404 without a live subscription. */
    async cancelAtPeriodEnd (userId) {
      provider.ensureConfigured()
      const record = await billingRecordOf(db, userId)
      const subscriptionId = record.payment_subscription_id
      if (subscriptionId === null || !isLive(record.payment_subscription_status)) throw new NoActiveSubscriptionError()
      const subscription = await provider.cancelAtPeriodEnd(subscriptionId)
      // Not marked (it ended, or another is stored, meanwhile): the stored state is the answer.
      const stored = await storeCancelAtPeriodEnd(db, userId, subscriptionId, LIVE_STATUSES, subscription.cancelAtPeriodEnd)
      return toStoredSubscription(stored ?? await billingRecordOf(db, userId))
    },

    /**
     * Before an account is deleted: stops everything the provider could bill it for. Its open
     * checkout can no longer be paid, and its customer is deleted, which cancels every
     * subscription of it (also one a webhook has not told us of yet); without a customer, a
     * live subscription is cancelled on its own. A provider failure throws (502) before
     * anything of ours is deleted. An account that never touched billing needs no provider.
     */
    async closeBillingAccount (userId) {
      const record = await billingRecordOf(db, userId)
      const customerId = record.payment_customer_id
      const liveSubscriptionId = isLive(record.payment_subscription_status) ? record.payment_subscription_id : null
      const openCheckoutSessionId = record.payment_checkout_session_id
      if (openCheckoutSessionId !== null) await provider.expireCheckoutSession(openCheckoutSessionId)
      if (customerId !== null) await provider.deleteCustomer(customerId)
      else if (liveSubscriptionId !== null) await provider.cancelNow(liveSubscriptionId)
    }
  }
}

/**
 * What an event does to the stored subscription of the user it targets, as billing/rules.ts
 * decides (late and reordered deliveries end in one state), in the caller's transaction: the
 * row stays locked from the read to the write.
 */
async function applyBillingEvent (tx: Kysely<Database>, target: SubscriptionTarget, event: BillingEvent): Promise<ApplyResult> {
  const stored = await lockBillingState(tx, target)
  if (stored === undefined) return { outcome: 'unknown' }
  const decision = decideBillingEvent(stored.state, event)
  if (decision.action === 'ignore') return { outcome: 'ignored', because: decision.because }
  if (decision.action === 'cancel-second-subscription') return { outcome: 'second-subscription', userId: stored.userId, subscriptionId: decision.subscriptionId }
  const plan = planFor(decision.state.status)
  await storeBillingState(tx, stored.userId, decision.state, {
    plan,
    ...(event.kind === 'checkout-completed' && { customerId: event.subscription.customerId })
  })
  return { outcome: 'applied', userId: stored.userId, plan, ...(decision.replaces !== undefined && { replaced: decision.replaces }) }
}

/**
 * Applies a planned event in the transaction that records it. A subscription nobody may be
 * billed for (a second one, one whose account is gone, or one a checkout replaced) is queued
 * for cancelling, in the same transaction: decided and recorded together, carried out after
 * the commit.
 */
async function applyPlanned (tx: Kysely<Database>, log: BillingLog, { target, event, checkoutSessionId }: Planned, paymentEventId: string): Promise<Applied> {
  const cancel = async (subscriptionId: string, reason: ProviderActionReason, userId: string | null): Promise<Applied> =>
    ({ outcome: 'applied', queued: await queueProviderAction(tx, { kind: 'cancel-subscription', subscriptionId, reason, userId, paymentEventId }) })
  const result = await applyBillingEvent(tx, target, event)
  if (checkoutSessionId !== null && 'userId' in target) await forgetCheckoutSession(tx, target.userId, checkoutSessionId)
  switch (result.outcome) {
    case 'unknown':
      if (event.kind === 'checkout-completed') {
        // Deleting the account deleted the provider customer, which ended its subscriptions.
        if (isEnded(event.subscription.status)) {
          log.info({ target, subscriptionId: event.subscription.id }, 'checkout completed for an account that no longer exists; its subscription has ended: nothing to cancel')
          return { outcome: 'ignored', queued: false }
        }
        log.warn({ target, subscriptionId: event.subscription.id }, 'checkout completed for an account that no longer exists: cancelling its subscription')
        return cancel(event.subscription.id, 'account-gone', 'userId' in target ? target.userId : null)
      }
      log.warn({ target }, 'webhook event for an unknown customer: recorded, nothing changed')
      return { outcome: 'ignored', queued: false }
    case 'second-subscription':
      log.warn({ userId: result.userId, subscriptionId: result.subscriptionId }, 'checkout completed a second subscription while one is live: cancelling it')
      return cancel(result.subscriptionId, 'second-subscription', result.userId)
    case 'ignored':
      log.info({ because: result.because }, 'webhook event changes nothing: recorded')
      return { outcome: 'ignored', queued: false }
    case 'applied':
      if (event.kind === 'checkout-completed' && result.plan === 'pro') {
        await recordUsageEvent(tx, { name: 'subscription_upgraded', userId: result.userId, properties: { userId: result.userId, plan: result.plan } })
      }
      if (result.replaced === undefined) return { outcome: 'applied', queued: false }
      log.info({ userId: result.userId, subscriptionId: result.replaced }, 'a checkout replaced a subscription that had not ended: cancelling it')
      return cancel(result.replaced, 'replaced', result.userId)
  }
}
