// Billing request and response schemas.
import { Type, type Static } from 'typebox'
import { Nullable, nullableRef, NullableTimestamp, ref, Success } from './common.js'
import { Plan } from './preferences.js'

const ReturnUrl = (description: string) => Type.String({
  maxLength: 2048,
  format: 'uri',
  pattern: '^https?://',
  errorMessage: { format: 'Must be an http(s) URL', pattern: 'Must be an http(s) URL' },
  description
})

export const CheckoutBody = Type.Object({
  priceId: Type.String({ minLength: 1, maxLength: 255, description: 'A price id from PAYMENT_PRICE_IDS', examples: ['price_pro_monthly'] }),
  successUrl: Type.Optional(ReturnUrl('Where the provider returns a payer; only on APP_URL or a CORS_ORIGINS origin (default CHECKOUT_SUCCESS_URL)')),
  cancelUrl: Type.Optional(ReturnUrl('Where the provider returns a payer who cancels; only on APP_URL or a CORS_ORIGINS origin (default CHECKOUT_CANCEL_URL)'))
}, { $id: 'CheckoutBody', additionalProperties: false, examples: [{ priceId: 'price_pro_monthly' }] })

export const RedirectUrl = Type.Object({
  url: Type.String({ format: 'uri', description: 'Where to send the user (the provider\'s hosted page)' })
})

export const CheckoutSession = Type.Object({
  url: Type.String({ format: 'uri', description: 'The provider\'s hosted checkout page' }),
  sessionId: Type.String({ description: 'The provider\'s checkout session id' })
})

const SubscriptionStatus = Type.String({ description: 'The provider\'s subscription status, e.g. active, past_due, canceled' })

/** The stored subscription as the origin web client reads it. */
export const SubscriptionDetails = Type.Object({
  id: Type.String({ description: 'The provider\'s subscription id' }),
  customerId: Nullable(Type.String({ description: 'The provider\'s customer id' })),
  status: Nullable(SubscriptionStatus),
  priceId: Nullable(Type.String()),
  currentPeriodEnd: NullableTimestamp,
  cancelAtPeriodEnd: Type.Boolean(),
  plan: ref(Plan)
}, { $id: 'SubscriptionDetails' })

export const Subscription = Type.Object({
  plan: ref(Plan),
  status: Nullable(SubscriptionStatus),
  subscriptionId: Nullable(Type.String()),
  priceId: Nullable(Type.String()),
  currentPeriodEnd: NullableTimestamp,
  cancelAtPeriodEnd: Type.Boolean(),
  subscription: nullableRef(SubscriptionDetails, 'null until a subscription is linked (no provider call: the stored record)')
}, { $id: 'Subscription' })
export type Subscription = Static<typeof Subscription>

export const SubscriptionResponse = Success(ref(Subscription), { $id: 'SubscriptionResponse' })

export const WebhookEvent = Type.Object({}, {
  additionalProperties: true,
  description: 'A Stripe event, delivered by Stripe and signed in the `stripe-signature` header'
})

export const WebhookReceived = Type.Object({ received: Type.Literal(true) })

// What the webhook reads from a provider event, checked after the signature: a signed
// payload with odd values is refused (400), never half-applied or a 500.
const ProviderId = Type.String({ pattern: '^[A-Za-z0-9_.:-]{1,255}$' })
const UnixTime = Type.Integer({ minimum: 0, maximum: 253402300799 })
const Reference = Type.Union([ProviderId, Type.Object({ id: ProviderId })])
const NullableReference = Type.Union([Reference, Type.Null()])
const Status = Type.String({ pattern: '^[a-z_]{1,50}$' })

export const ProviderEventEnvelope = Type.Object({
  id: ProviderId,
  type: Type.String({ minLength: 1, maxLength: 255 }),
  created: UnixTime,
  data: Type.Object({ object: Type.Object({}) })
})

export const CheckoutSessionObject = Type.Object({
  id: Type.Optional(ProviderId),
  mode: Type.Optional(Type.String({ maxLength: 50 })),
  client_reference_id: Type.Optional(Type.Union([Type.String({ format: 'uuid' }), Type.Null()])),
  metadata: Type.Optional(Type.Union([Type.Object({ userId: Type.Optional(Type.String({ format: 'uuid' })) }), Type.Null()])),
  customer: Type.Optional(NullableReference),
  subscription: Type.Optional(NullableReference)
})

export const SubscriptionObject = Type.Object({
  id: ProviderId,
  customer: Reference,
  status: Status,
  cancel_at_period_end: Type.Optional(Type.Boolean()),
  items: Type.Optional(Type.Object({
    data: Type.Array(Type.Object({
      price: Type.Optional(Type.Object({ id: ProviderId })),
      current_period_end: Type.Optional(UnixTime)
    }), { maxItems: 100 })
  }))
})

export const InvoiceObject = Type.Object({
  customer: Type.Optional(NullableReference),
  parent: Type.Optional(Type.Union([Type.Object({
    subscription_details: Type.Optional(Type.Union([Type.Object({ subscription: Type.Optional(NullableReference) }), Type.Null()]))
  }), Type.Null()])),
  lines: Type.Optional(Type.Object({
    data: Type.Array(Type.Object({ period: Type.Optional(Type.Object({ end: UnixTime })) }), { maxItems: 1000 })
  }))
})
