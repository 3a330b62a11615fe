// Webhook events shaped as Stripe sends them for the API version the SDK pins, and
// deliveries signed with the SDK's own test signer.
import Stripe from 'stripe'
import { DAY, PERIOD, ids, now, randomChars } from './stripe-stand-in/ids.js'
import { CURRENCY, UNIT_AMOUNT } from './stripe-stand-in/objects.js'

export interface StripeEventLike {
  id: string
  object: 'event'
  api_version: string
  created: number
  data: { object: any, previous_attributes?: Record<string, unknown> }
  livemode: false
  pending_webhooks: number
  request: { id: string | null, idempotency_key: string | null }
  type: string
}

export interface EventOptions {
  /** Event id; default a fresh `evt_1…`. */
  id?: string
  /** Event `created` (unix seconds); default now. */
  created?: number
  /** `data.previous_attributes` (Stripe sends it on `*.updated` events). */
  previousAttributes?: Record<string, unknown>
}

export interface InvoiceOptions extends EventOptions {
  /** End of the period the invoice pays for (lines.data[0].period.end); default the subscription item's current_period_end. */
  periodEnd?: number
  /** Start of that period; default the item's current_period_end when periodEnd moves past it, else periodEnd minus the item's period length. */
  periodStart?: number
  /** Invoice id; default a fresh `in_1…`. */
  invoiceId?: string
  /** Default 'subscription_cycle'. */
  billingReason?: string
  customerEmail?: string | null
}

/**
 * A deep copy as it would travel in JSON: objects the SDK hands back (its Decimal for
 * `*_decimal` fields, Dates) become the strings and numbers Stripe sends.
 */
function toWire (value: unknown): any {
  if (typeof value === 'bigint') return Number(value)
  if (value instanceof Date) return Math.floor(value.getTime() / 1000)
  if (Array.isArray(value)) return value.map(toWire)
  if (value !== null && typeof value === 'object') {
    const proto = Object.getPrototypeOf(value)
    if (proto !== Object.prototype && proto !== null && typeof (value as { toString?: unknown }).toString === 'function' &&
      (value as { toString: () => string }).toString !== Object.prototype.toString) {
      return String(value)
    }
    const out: Record<string, unknown> = {}
    for (const [key, inner] of Object.entries(value)) {
      if (inner !== undefined && typeof inner !== 'function') out[key] = toWire(inner)
    }
    return out
  }
  return value
}

/** A Stripe-shaped (snapshot, v1) event around a copy of `object`. */
export function makeEvent (type: string, object: unknown, opts: EventOptions = {}): StripeEventLike {
  const data: StripeEventLike['data'] = { object: toWire(object) }
  if (opts.previousAttributes) data.previous_attributes = toWire(opts.previousAttributes)
  return {
    id: opts.id ?? ids.event(),
    object: 'event',
    api_version: Stripe.API_VERSION,
    created: opts.created ?? now(),
    data,
    livemode: false,
    pending_webhooks: 1,
    request: { id: null, idempotency_key: null },
    type
  }
}

/** `checkout.session.completed` for a session as completeCheckout returns it (status complete, payment_status paid, subscription and customer ids, client_reference_id). */
export function checkoutSessionCompleted (session: any, opts: EventOptions = {}): StripeEventLike {
  return makeEvent('checkout.session.completed', session, opts)
}

export function subscriptionUpdated (subscription: any, opts: EventOptions = {}): StripeEventLike {
  return makeEvent('customer.subscription.updated', subscription, opts)
}

/** `customer.subscription.deleted`; a subscription not yet canceled is sent as Stripe would: status canceled, ended_at and canceled_at set. */
export function subscriptionDeleted (subscription: any, opts: EventOptions = {}): StripeEventLike {
  const event = makeEvent('customer.subscription.deleted', subscription, opts)
  const object = event.data.object
  if (object && object.status !== 'canceled' && object.status !== 'incomplete_expired') {
    object.status = 'canceled'
    object.ended_at = event.created
    object.canceled_at ??= event.created
    object.cancellation_details = { comment: null, feedback: null, reason: 'cancellation_requested', ...object.cancellation_details }
    object.cancellation_details.reason ??= 'cancellation_requested'
  }
  return event
}

/**
 * An invoice for one period of `subscription`, as of this API version: its subscription
 * under `parent.subscription_details.subscription`, the period it pays for on
 * `lines.data[0].period` and the price under `lines.data[0].pricing.price_details.price`.
 * Like Stripe's, the invoice-level `period_start`/`period_end` are the *previous* period
 * (for subscription invoices they are not the paid period).
 */
export function invoiceObject (subscription: any, status: 'paid' | 'open', opts: InvoiceOptions = {}): any {
  const item = subscription.items?.data?.[0] ?? {}
  const price = item.price ?? {}
  const priceId: string | null = typeof price === 'string' ? price : price.id ?? null
  const product: string | null = typeof price === 'object' ? (typeof price.product === 'string' ? price.product : price.product?.id ?? null) : null
  const quantity: number = item.quantity ?? 1
  const unitAmount: number = typeof price === 'object' && typeof price.unit_amount === 'number' ? price.unit_amount : UNIT_AMOUNT
  const amount = unitAmount * quantity
  const currency: string = subscription.currency ?? price.currency ?? CURRENCY
  const created = opts.created ?? now()
  const itemStart: number = item.current_period_start ?? created
  const itemEnd: number = item.current_period_end ?? itemStart + PERIOD
  const periodEnd = opts.periodEnd ?? itemEnd
  const periodStart = opts.periodStart ??
    (opts.periodEnd === undefined ? itemStart : opts.periodEnd > itemEnd ? itemEnd : opts.periodEnd - (itemEnd - itemStart))
  const id = opts.invoiceId ?? ids.invoice()
  const paid = status === 'paid'
  const customer = typeof subscription.customer === 'string' ? subscription.customer : subscription.customer?.id ?? null
  const number = `${randomChars(8).toUpperCase()}-0001`
  const line = {
    id: ids.invoiceLine(),
    object: 'line_item',
    amount,
    currency,
    description: `${quantity} × Pro (at $${(unitAmount / 100).toFixed(2)} / month)`,
    discount_amounts: [],
    discountable: true,
    discounts: [],
    invoice: id,
    livemode: false,
    metadata: {},
    parent: {
      invoice_item_details: null,
      subscription_item_details: {
        invoice_item: null,
        proration: false,
        proration_details: { credited_items: null },
        subscription: subscription.id,
        subscription_item: item.id ?? null
      },
      type: 'subscription_item_details'
    },
    period: { end: periodEnd, start: periodStart },
    pretax_credit_amounts: [],
    pricing: {
      price_details: { price: priceId, product },
      type: 'price_details',
      unit_amount_decimal: String(unitAmount)
    },
    quantity,
    quantity_decimal: String(quantity),
    subscription: subscription.id,
    subtotal: amount,
    taxes: []
  }
  return {
    id,
    object: 'invoice',
    account_country: 'US',
    account_name: 'Stand-in Test Account',
    account_tax_ids: null,
    amount_due: amount,
    amount_overpaid: 0,
    amount_paid: paid ? amount : 0,
    amount_remaining: paid ? 0 : amount,
    amount_shipping: 0,
    application: null,
    attempt_count: 1,
    attempted: true,
    auto_advance: !paid,
    automatic_tax: { disabled_reason: null, enabled: false, liability: null, provider: null, status: null },
    automatically_finalizes_at: null,
    billing_reason: opts.billingReason ?? 'subscription_cycle',
    collection_method: 'charge_automatically',
    created,
    currency,
    custom_fields: null,
    customer,
    customer_account: null,
    customer_address: null,
    customer_email: opts.customerEmail ?? null,
    customer_name: null,
    customer_phone: null,
    customer_shipping: null,
    customer_tax_exempt: 'none',
    customer_tax_ids: [],
    default_payment_method: null,
    default_source: null,
    default_tax_rates: [],
    description: null,
    discounts: [],
    due_date: null,
    effective_at: created,
    ending_balance: 0,
    footer: null,
    from_invoice: null,
    hosted_invoice_url: `https://invoice.stripe.test/i/acct_test/test_${randomChars(40)}`,
    invoice_pdf: `https://pay.stripe.test/invoice/acct_test/test_${randomChars(40)}/pdf`,
    issuer: { type: 'self' },
    last_finalization_error: null,
    latest_revision: null,
    lines: { object: 'list', data: [line], has_more: false, total_count: 1, url: `/v1/invoices/${id}/lines` },
    livemode: false,
    metadata: {},
    next_payment_attempt: paid ? null : created + 3 * DAY,
    number,
    on_behalf_of: null,
    parent: {
      quote_details: null,
      subscription_details: { metadata: toWire(subscription.metadata ?? {}), subscription: subscription.id },
      type: 'subscription_details'
    },
    payment_settings: { default_mandate: null, payment_method_options: null, payment_method_types: null },
    period_end: periodStart,
    period_start: periodStart - (periodEnd - periodStart),
    post_payment_credit_notes_amount: 0,
    pre_payment_credit_notes_amount: 0,
    receipt_number: null,
    rendering: null,
    shipping_cost: null,
    shipping_details: null,
    starting_balance: 0,
    statement_descriptor: null,
    status,
    status_transitions: { finalized_at: created, marked_uncollectible_at: null, paid_at: paid ? created : null, voided_at: null },
    subtotal: amount,
    subtotal_excluding_tax: amount,
    test_clock: null,
    total: amount,
    total_discount_amounts: [],
    total_excluding_tax: amount,
    total_pretax_credit_amounts: [],
    total_taxes: [],
    webhooks_delivered_at: created
  }
}

/** `invoice.payment_succeeded` for the next (or, without periodEnd, the current) period of `subscription`. */
export function invoicePaymentSucceeded (subscription: any, opts: InvoiceOptions = {}): StripeEventLike {
  return makeEvent('invoice.payment_succeeded', invoiceObject(subscription, 'paid', opts), opts)
}

/** `invoice.payment_failed`: the invoice stays open, with a next payment attempt. */
export function invoicePaymentFailed (subscription: any, opts: InvoiceOptions = {}): StripeEventLike {
  return makeEvent('invoice.payment_failed', invoiceObject(subscription, 'open', opts), opts)
}

/**
 * Body string and headers exactly as Stripe delivers them (pretty-printed JSON), signed
 * with the SDK's own `webhooks.generateTestHeaderString`. `opts.body` signs and sends that
 * exact string instead; `opts.timestamp` (unix seconds) defaults to now.
 */
export function signedDelivery (event: unknown, secret: string, opts: { timestamp?: number, body?: string } = {}): { body: string, headers: Record<string, string> } {
  const body = opts.body ?? JSON.stringify(event, null, 2)
  const signature = Stripe.webhooks.generateTestHeaderString({ payload: body, secret, timestamp: opts.timestamp ?? now() })
  return {
    body,
    headers: {
      'content-type': 'application/json; charset=utf-8',
      'stripe-signature': signature,
      'user-agent': 'Stripe/1.0 (+https://stripe.com/docs/webhooks)',
      accept: '*/*; q=0.5, application/xml',
      'cache-control': 'no-cache'
    }
  }
}
