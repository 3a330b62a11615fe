// Billing request and response schemas.
import { Type } from 'typebox'
import { Nullable, NullableTimestamp } from './common.js'

export const CheckoutBody = Type.Object({
  priceId: Type.String({ minLength: 1, maxLength: 255, description: 'A price id from PAYMENT_PRICE_IDS', examples: ['price_pro_monthly'] })
}, { additionalProperties: false, examples: [{ priceId: 'price_pro_monthly' }] })

export const RedirectUrl = Type.Object({
  url: Type.String({ format: 'uri', description: 'Where to send the user (the provider\'s hosted page)' })
})

export const Subscription = Type.Object({
  plan: Type.String({ description: '`pro` while the subscription is active, trialing or past_due, else `free`' }),
  status: Nullable(Type.String({ description: 'The provider\'s subscription status, e.g. active, past_due, canceled' })),
  subscriptionId: Nullable(Type.String()),
  priceId: Nullable(Type.String()),
  currentPeriodEnd: NullableTimestamp,
  cancelAtPeriodEnd: Type.Boolean()
})

export const WebhookEvent = Type.Object({}, {
  additionalProperties: true,
  description: 'A Stripe event, delivered by Stripe and signed in the `stripe-signature` header'
})

export const WebhookReceived = Type.Object({ received: Type.Literal(true) })
