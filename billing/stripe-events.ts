// Stripe's objects in our terms (part of the Stripe adapter, billing/stripe-provider.ts): pure,
// no I/O. The one mapping from a Stripe subscription to the ProviderSubscription the rules
// use; the event types we handle (the one list: the webhook's description and docs/billing.md
// follow it); the shape check of a signed event; and what each handled event means
// (billing/service.ts applies it).
import type Stripe from 'stripe'
import { Value } from 'typebox/value'
import type { TSchema } from 'typebox'
import { CheckoutSessionObject, InvoiceObject, ProviderEventEnvelope, SubscriptionObject } from '../schemas/billing.js'
import { ValidationError } from '../errors.js'
import type { EventMeaning, ProviderEvent } from './provider.js'
import { HANDLED_EVENT_TYPES, type HandledEventType } from './stripe-event-types.js'
import type { ProviderSubscription } from './rules.js'

export const unixToDate = (seconds: number | null | undefined): Date | null =>
  typeof seconds === 'number' ? new Date(seconds * 1000) : null

/** A provider reference, expanded or not, as its id. */
export const idOf = (value: string | { id: string } | null | undefined): string | null =>
  value == null ? null : typeof value === 'string' ? value : value.id

/** Stripe's subscription as we keep it. In this API version the period lives on its items. */
export function fromStripeSubscription (subscription: Stripe.Subscription): ProviderSubscription {
  const item = subscription.items?.data?.[0]
  return {
    id: subscription.id,
    customerId: idOf(subscription.customer) ?? '',
    status: subscription.status,
    priceId: item?.price?.id ?? null,
    currentPeriodEnd: unixToDate(item?.current_period_end),
    cancelAtPeriodEnd: subscription.cancel_at_period_end ?? false
  }
}

// The shape of what each handled type carries in data.object.
const OBJECT_SCHEMAS: Record<HandledEventType, TSchema> = {
  'checkout.session.completed': CheckoutSessionObject,
  'customer.subscription.updated': SubscriptionObject,
  'customer.subscription.deleted': SubscriptionObject,
  'invoice.payment_succeeded': InvoiceObject,
  'invoice.payment_failed': InvoiceObject
}

const isHandledType = (type: string): type is HandledEventType => (HANDLED_EVENT_TYPES as readonly string[]).includes(type)

export const isHandled = (event: Stripe.Event): boolean => isHandledType(event.type)

/**
 * A signed body, parsed, as an event we can read: 400 when it is not shaped like what we
 * read from it (nothing a retry would fix). The envelope first: using `type` as a key
 * before knowing it is a string would stringify whatever it is, however deep.
 */
export function readProviderEvent (body: unknown): Stripe.Event {
  if (!Value.Check(ProviderEventEnvelope, body)) throw new ValidationError(['Not a well-formed provider event - body'])
  if (isHandledType(body.type) && !Value.Check(OBJECT_SCHEMAS[body.type], body.data.object)) {
    throw new ValidationError(['Not a well-formed provider event - body'])
  }
  return body as unknown as Stripe.Event
}

export function meaningOf (event: Stripe.Event): EventMeaning {
  const at = new Date(event.created * 1000)
  switch (event.type) {
    case 'checkout.session.completed': {
      const session = event.data.object
      const userId = session.client_reference_id ?? session.metadata?.userId
      const subscriptionId = idOf(session.subscription)
      if (session.mode !== 'subscription' || !userId || !subscriptionId) return { kind: 'nothing', why: 'checkout session without user or subscription' }
      return { kind: 'checkout', at, userId, subscriptionId, customerId: idOf(session.customer), checkoutSessionId: session.id ?? null }
    }
    case 'customer.subscription.updated':
    case 'customer.subscription.deleted': {
      const subscription = fromStripeSubscription(event.data.object)
      const deleted = event.type === 'customer.subscription.deleted'
      return {
        kind: 'apply',
        target: { customerId: subscription.customerId },
        event: deleted
          ? { kind: 'subscription-deleted', at, subscription: { ...subscription, status: 'canceled', cancelAtPeriodEnd: false } }
          : { kind: 'subscription-updated', at, subscription }
      }
    }
    case 'invoice.payment_succeeded':
    case 'invoice.payment_failed': {
      const invoice = event.data.object
      const subscriptionId = idOf(invoice.parent?.subscription_details?.subscription)
      const customerId = idOf(invoice.customer)
      if (!subscriptionId || !customerId) return { kind: 'nothing', why: 'invoice without subscription or customer' }
      return {
        kind: 'apply',
        target: { customerId },
        event: event.type === 'invoice.payment_succeeded'
          ? { kind: 'invoice-paid', at, subscriptionId, periodEnd: unixToDate(invoice.lines?.data?.[0]?.period?.end) }
          : { kind: 'invoice-failed', at, subscriptionId }
      }
    }
    default:
      return { kind: 'nothing', why: 'event type not handled' }
  }
}

/** A signed body, parsed, as the event of ours billing/service.ts applies (readProviderEvent's 400 included). */
export function toProviderEvent (body: unknown): ProviderEvent {
  const event = readProviderEvent(body)
  return { id: event.id, type: event.type, created: new Date(event.created * 1000), meaning: isHandled(event) ? meaningOf(event) : null }
}
