// Billing, as the routes ask for it: provider events applied exactly once, checkout, the
// portal, cancellation, and closing an account's billing. It joins the provider client
// (fastify.payments), the rules (billing/rules.ts), the meaning of provider events
// (billing/events.ts) and the stored state (db/billing.ts); routes stay HTTP only. No
// provider call runs inside a database transaction: one a webhook decides on is queued in
// the transaction and carried out after it commits (billing/provider-actions.ts).
import type { FastifyBaseLogger } from 'fastify'
import type { Kysely } from 'kysely'
import type Stripe from 'stripe'
import {
  applyBillingEvent, forgetCheckoutSession, hasBillingRecord, isPaymentEventRecorded, linkCustomer, queueProviderAction,
  recordPaymentEvent, replaceOpenCheckoutSession, storeCancelAtPeriodEnd, toStoredSubscription
} from '../db/billing.js'
import { getPreferences } from '../db/preferences.js'
import type { Database } from '../db/types.js'
import { recordUsageEvent } from '../db/usage-events.js'
import type { Payments } from '../plugins/app/payments.js'
import type { Subscription } from '../schemas/billing.js'
import { NoActiveSubscriptionError, NoBillingAccountError, PaymentProviderError, SubscriptionAlreadyActiveError } from '../errors.js'
import { isHandled, meaningOf, type SubscriptionTarget } from './events.js'
import { isEnded, isLive, type BillingEvent } from './rules.js'

export interface BillingContext {
  db: Kysely<Database>
  payments: Payments
  log: FastifyBaseLogger
}

export interface WebhookContext extends BillingContext {
  /** Told after a commit that queued a provider action, so it is carried out at once. */
  providerActions: { wake: () => void }
}

interface Planned { target: SubscriptionTarget, event: BillingEvent, checkoutSessionId: string | null }

/**
 * What became of a provider event: it changed our state (or decided to cancel a subscription
 * nobody may be billed for), it changed nothing (a type we do not handle, an unknown customer,
 * an older state than the stored one), or it had been applied before.
 */
export type EventOutcome = 'applied' | 'ignored' | 'duplicate'

/**
 * Applies a provider event whose signature and shape were checked: once (its id is recorded
 * in the transaction of its effect, so a redelivery, or two racing on two instances, changes
 * nothing more), in any order (billing/rules.ts). A failure records nothing, so the
 * provider's retry applies it later. A provider call the event needs is queued in that
 * transaction and made after it commits: the event is done once recorded, whatever the
 * provider then takes.
 */
export async function applyProviderEvent ({ db, payments, log, providerActions }: WebhookContext, event: Stripe.Event): Promise<EventOutcome> {
  if (!isHandled(event)) {
    log.info('webhook event type not handled: ignored')
    return 'ignored'
  }
  // Cheap early exit for redeliveries; the insert below is what settles a race.
  if (await isPaymentEventRecorded(db, event.id)) {
    log.info('webhook event already applied')
    return 'duplicate'
  }
  const meaning = meaningOf(event)
  let planned: Planned | null = null
  if (meaning.kind === 'apply') {
    planned = { target: meaning.target, event: meaning.event, checkoutSessionId: null }
  } else if (meaning.kind === 'checkout') {
    const subscription = await payments.retrieveSubscription(meaning.subscriptionId)
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
    if (!await recordPaymentEvent(tx, { id: event.id, type: event.type, created: new Date(event.created * 1000) })) return { outcome: 'duplicate', queued: false }
    return planned === null ? { outcome: 'ignored', queued: false } : applyPlanned(tx, log, planned, event.id)
  })
  if (queued) providerActions.wake()
  return outcome
}

interface Applied { outcome: EventOutcome, queued: boolean }

/**
 * Applies a planned event in the transaction that records it. A subscription nobody may be
 * billed for (a second one, or one whose account is gone) is queued for cancelling, in the
 * same transaction: decided and recorded together, carried out after the commit.
 */
async function applyPlanned (db: Kysely<Database>, log: FastifyBaseLogger, { target, event, checkoutSessionId }: Planned, paymentEventId: string): Promise<Applied> {
  const result = await applyBillingEvent(db, target, event)
  if (checkoutSessionId !== null && 'userId' in target) await forgetCheckoutSession(db, target.userId, checkoutSessionId)
  switch (result.outcome) {
    case 'unknown':
      if (event.kind === 'checkout-completed') {
        // Deleting the account deleted the provider customer, which ended its subscriptions.
        if (isEnded(event.subscription.status)) {
          log.info({ target, subscriptionId: event.subscription.id }, 'checkout completed for an account that no longer exists; its subscription has ended: nothing to cancel')
          return { outcome: 'ignored', queued: false }
        }
        log.warn({ target, subscriptionId: event.subscription.id }, 'checkout completed for an account that no longer exists: cancelling its subscription')
        const queued = await queueProviderAction(db, {
          kind: 'cancel-subscription',
          subscriptionId: event.subscription.id,
          reason: 'account-gone',
          userId: 'userId' in target ? target.userId : null,
          paymentEventId
        })
        return { outcome: 'applied', queued }
      }
      log.warn({ target }, 'webhook event for an unknown customer: recorded, nothing changed')
      return { outcome: 'ignored', queued: false }
    case 'second-subscription': {
      log.warn({ userId: result.userId, subscriptionId: result.subscriptionId }, 'checkout completed a second subscription while one is live: cancelling it')
      const queued = await queueProviderAction(db, {
        kind: 'cancel-subscription',
        subscriptionId: result.subscriptionId,
        reason: 'second-subscription',
        userId: result.userId,
        paymentEventId
      })
      return { outcome: 'applied', queued }
    }
    case 'ignored':
      log.info({ because: result.because }, 'webhook event changes nothing: recorded')
      return { outcome: 'ignored', queued: false }
    case 'applied':
      if (event.kind === 'checkout-completed' && result.plan === 'pro') {
        await recordUsageEvent(db, { name: 'subscription_upgraded', userId: result.userId, properties: { userId: result.userId, plan: result.plan } })
      }
      return { outcome: 'applied', queued: false }
  }
}

/**
 * A hosted checkout for the user, on a price already checked: 409 while a subscription is
 * live. The provider customer is created once and stored before the session. Of the user's
 * checkouts only the newest can be paid: the one it replaces (opened earlier, or by a
 * concurrent request) is expired. Should that fail, the new session still stands: the
 * webhook cancels a second subscription if the old one is paid after all. With an
 * `idempotencyKey` (a retried request's), the provider answers a repeat with the session it
 * opened the first time, which is then the stored one already and stays open.
 */
export async function startCheckout (
  { db, payments, log }: BillingContext,
  user: { id: string, email: string },
  session: { priceId: string, successUrl: string, cancelUrl: string, idempotencyKey?: string }
): Promise<{ url: string, sessionId: string }> {
  payments.ensureConfigured()
  const preferences = await getPreferences(db, user.id)
  if (isLive(preferences.payment_subscription_status)) throw new SubscriptionAlreadyActiveError()
  const customerId = preferences.payment_customer_id ??
    await linkCustomer(db, user.id, await payments.createCustomer({ id: user.id, email: user.email }))
  const opened = await payments.createCheckoutSession({ customerId, userId: user.id, ...session })
  const previous = await replaceOpenCheckoutSession(db, user.id, opened.sessionId)
  if (previous !== null && previous !== opened.sessionId) {
    await payments.expireCheckoutSession(previous).catch((err: unknown) => {
      log.warn({ err, checkoutSessionId: previous }, 'could not expire the previous checkout session')
    })
  }
  return opened
}

/**
 * The provider's billing portal for the user; 404 before they have a provider customer. With
 * an `idempotencyKey` (a retried request's), a repeat gets the same portal session.
 */
export async function openBillingPortal ({ db, payments }: BillingContext, userId: string, options: { idempotencyKey?: string } = {}): Promise<string> {
  payments.ensureConfigured()
  const { payment_customer_id: customerId } = await getPreferences(db, userId)
  if (customerId === null) throw new NoBillingAccountError()
  return payments.createPortalSession(customerId, options)
}

/** The stored subscription (the webhooks keep it current); no provider call. */
export async function storedSubscription ({ db, payments }: BillingContext, userId: string): Promise<Subscription> {
  payments.ensureConfigured()
  return toStoredSubscription(await getPreferences(db, userId))
}

/** Cancels at the end of the paid period; 404 without a live subscription. */
export async function cancelAtPeriodEnd ({ db, payments }: BillingContext, userId: string): Promise<Subscription> {
  payments.ensureConfigured()
  const preferences = await getPreferences(db, userId)
  const subscriptionId = preferences.payment_subscription_id
  if (subscriptionId === null || !isLive(preferences.payment_subscription_status)) throw new NoActiveSubscriptionError()
  const subscription = await payments.cancelAtPeriodEnd(subscriptionId)
  return toStoredSubscription(await storeCancelAtPeriodEnd(db, userId, subscription))
}

/**
 * Before an account is deleted: stops everything the provider could bill it for. Its open
 * checkout can no longer be paid, and its customer is deleted, which cancels every
 * subscription of it (also one a webhook has not told us of yet); without a customer, a
 * live subscription is cancelled on its own. A provider failure throws (502) before
 * anything of ours is deleted. An account that never touched billing needs no provider.
 */
export async function closeBillingAccount ({ db, payments }: BillingContext, userId: string): Promise<void> {
  const preferences = await getPreferences(db, userId)
  const customerId = preferences.payment_customer_id
  const liveSubscriptionId = isLive(preferences.payment_subscription_status) ? preferences.payment_subscription_id : null
  const openCheckoutSessionId = preferences.payment_checkout_session_id
  if (openCheckoutSessionId !== null) await payments.expireCheckoutSession(openCheckoutSessionId)
  if (customerId !== null) await payments.deleteCustomer(customerId)
  else if (liveSubscriptionId !== null) await payments.cancelNow(liveSubscriptionId)
}
