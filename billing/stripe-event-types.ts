// The Stripe event types the webhook handles, apart from stripe-events.ts so that the webhook
// route can name them in its description without loading the reading of events (and TypeBox's
// value checker) at start-up: that loads with the first delivery (issue 34).
import type Stripe from 'stripe'

/** The Stripe event types the webhook handles; others are acknowledged and ignored. */
export const HANDLED_EVENT_TYPES = [
  'checkout.session.completed',
  'customer.subscription.updated',
  'customer.subscription.deleted',
  'invoice.payment_succeeded',
  'invoice.payment_failed'
] as const satisfies readonly Stripe.Event.Type[]

export type HandledEventType = typeof HANDLED_EVENT_TYPES[number]
