// Stripe-shaped objects for the API version the SDK pins: price (and its legacy plan),
// customer, subscription, checkout session, billing portal session. Pure builders.
import type { CreateSubscriptionOptions } from '../stripe-stand-in.js'
import { DAY, PERIOD, ids, now, randomChars } from './ids.js'

type Obj = Record<string, any>

export const UNIT_AMOUNT = 1000
export const CURRENCY = 'usd'

/** A monthly recurring price of UNIT_AMOUNT for any `price_…` id. */
export function priceObject (id: string): Obj {
  return {
    id,
    object: 'price',
    active: true,
    billing_scheme: 'per_unit',
    created: now(),
    currency: CURRENCY,
    custom_unit_amount: null,
    livemode: false,
    lookup_key: null,
    metadata: {},
    nickname: null,
    product: `prod_${id.replace(/^price_/, '').replace(/[^a-zA-Z0-9]/g, '').padEnd(14, '0').slice(0, 14)}`,
    recurring: { interval: 'month', interval_count: 1, meter: null, trial_period_days: null, usage_type: 'licensed' },
    tax_behavior: 'unspecified',
    tiers_mode: null,
    transform_quantity: null,
    type: 'recurring',
    unit_amount: UNIT_AMOUNT,
    unit_amount_decimal: String(UNIT_AMOUNT)
  }
}

/** The legacy `plan` every subscription item still carries, mirroring its price. */
function planFor (p: Obj): Obj {
  return {
    id: p.id,
    object: 'plan',
    active: p.active,
    amount: p.unit_amount,
    amount_decimal: p.unit_amount_decimal,
    billing_scheme: p.billing_scheme,
    created: p.created,
    currency: p.currency,
    interval: p.recurring.interval,
    interval_count: p.recurring.interval_count,
    livemode: false,
    metadata: {},
    meter: null,
    nickname: null,
    product: p.product,
    tiers_mode: null,
    transform_usage: null,
    trial_period_days: null,
    usage_type: p.recurring.usage_type
  }
}

export function customerObject (fields: { email: string | null, metadata: Obj }): Obj {
  return {
    id: ids.customer(),
    object: 'customer',
    address: null,
    balance: 0,
    created: now(),
    currency: null,
    customer_account: null,
    default_source: null,
    delinquent: false,
    description: null,
    discount: null,
    email: fields.email,
    invoice_prefix: randomChars(8).toUpperCase(),
    invoice_settings: { custom_fields: null, default_payment_method: null, footer: null, rendering_options: null },
    livemode: false,
    metadata: fields.metadata,
    name: null,
    next_invoice_sequence: 1,
    phone: null,
    preferred_locales: [],
    shipping: null,
    tax_exempt: 'none',
    test_clock: null
  }
}

/** What a subscription is made of: as the tests ask for one, with the price object, and from a checkout its first invoice and payment method. */
export type SubscriptionFields = Omit<CreateSubscriptionOptions, 'price'> & { price: Obj, latestInvoice?: string, defaultPaymentMethod?: string }

/** A subscription with one item; in this API version the period lives on the item. */
export function subscriptionObject (fields: SubscriptionFields): Obj {
  const created = now()
  const start = fields.currentPeriodStart ?? created
  const end = fields.currentPeriodEnd ?? start + PERIOD
  const status = fields.status ?? 'active'
  const id = ids.subscription()
  const item = {
    id: ids.subscriptionItem(),
    object: 'subscription_item',
    billing_thresholds: null,
    created,
    current_period_end: end,
    current_period_start: start,
    current_trial: null,
    discounts: [],
    metadata: {},
    plan: planFor(fields.price),
    price: fields.price,
    quantity: fields.quantity ?? 1,
    subscription: id,
    tax_rates: []
  }
  const ended = status === 'canceled' || status === 'incomplete_expired'
  return {
    id,
    object: 'subscription',
    application: null,
    application_fee_percent: null,
    automatic_tax: { disabled_reason: null, enabled: false, liability: null },
    billing_cycle_anchor: start,
    billing_cycle_anchor_config: null,
    billing_mode: { flexible: { proration_discounts: 'included' }, type: 'flexible', updated_at: created },
    billing_schedules: [],
    billing_thresholds: null,
    cancel_at: null,
    cancel_at_period_end: false,
    canceled_at: ended ? created : null,
    cancellation_details: { comment: null, feedback: null, reason: ended ? 'cancellation_requested' : null },
    collection_method: 'charge_automatically',
    created,
    currency: CURRENCY,
    customer: fields.customer,
    customer_account: null,
    days_until_due: null,
    default_payment_method: fields.defaultPaymentMethod ?? null,
    default_source: null,
    default_tax_rates: [],
    description: null,
    discounts: [],
    ended_at: ended ? created : null,
    invoice_settings: { account_tax_ids: null, issuer: { type: 'self' } },
    items: { object: 'list', data: [item], has_more: false, total_count: 1, url: `/v1/subscription_items?subscription=${id}` },
    latest_invoice: fields.latestInvoice ?? null,
    livemode: false,
    managed_payments: null,
    metadata: { ...(fields.metadata ?? {}) },
    next_pending_invoice_item_invoice: null,
    on_behalf_of: null,
    pause_collection: null,
    payment_settings: { payment_method_options: null, payment_method_types: null, save_default_payment_method: 'off' },
    pending_invoice_item_interval: null,
    pending_setup_intent: null,
    pending_update: null,
    schedule: null,
    start_date: start,
    status,
    test_clock: null,
    transfer_data: null,
    trial_end: status === 'trialing' ? end : null,
    trial_settings: { end_behavior: { missing_payment_method: 'create_invoice' } },
    trial_start: status === 'trialing' ? start : null
  }
}

/** Where the hosted pages are: Stripe-like hosts nobody serves, unless the stand-in serves them (hosted-pages.ts). */
const CHECKOUT_PAGES = 'https://checkout.stripe.test'
const PORTAL_PAGES = 'https://billing.stripe.test'

/** An open subscription-mode checkout session, paid through `url` within a day. */
export function checkoutSessionObject (fields: {
  customer: string | null, total: number, clientReferenceId: string | null, metadata: Obj, successUrl: string | null, cancelUrl: string | null, pagesUrl?: string
}): Obj {
  const id = ids.checkoutSession()
  const created = now()
  return {
    id,
    object: 'checkout.session',
    adaptive_pricing: { enabled: false },
    after_expiration: null,
    allow_promotion_codes: null,
    amount_subtotal: fields.total,
    amount_total: fields.total,
    automatic_tax: { enabled: false, liability: null, provider: null, status: null },
    billing_address_collection: null,
    cancel_url: fields.cancelUrl,
    client_reference_id: fields.clientReferenceId,
    client_secret: null,
    collected_information: null,
    consent: null,
    consent_collection: null,
    created,
    currency: CURRENCY,
    currency_conversion: null,
    custom_fields: [],
    custom_text: { after_submit: null, shipping_address: null, submit: null, terms_of_service_acceptance: null },
    customer: fields.customer,
    customer_account: null,
    customer_creation: fields.customer === null ? 'always' : null,
    customer_details: null,
    customer_email: null,
    discounts: [],
    expires_at: created + DAY,
    integration_identifier: null,
    invoice: null,
    invoice_creation: null,
    livemode: false,
    locale: null,
    managed_payments: null,
    metadata: fields.metadata,
    mode: 'subscription',
    origin_context: null,
    payment_intent: null,
    payment_link: null,
    payment_method_collection: 'always',
    payment_method_configuration_details: null,
    payment_method_options: { card: { request_three_d_secure: 'automatic' } },
    payment_method_types: ['card'],
    payment_status: 'unpaid',
    permissions: null,
    phone_number_collection: { enabled: false },
    recovered_from: null,
    saved_payment_method_options: { allow_redisplay_filters: ['always'], payment_method_remove: 'disabled', payment_method_save: null },
    setup_intent: null,
    shipping_address_collection: null,
    shipping_cost: null,
    shipping_options: [],
    status: 'open',
    submit_type: null,
    subscription: null,
    success_url: fields.successUrl,
    total_details: { amount_discount: 0, amount_shipping: 0, amount_tax: 0 },
    ui_mode: 'hosted_page',
    url: `${fields.pagesUrl ?? CHECKOUT_PAGES}/c/pay/${id}`,
    wallet_options: null
  }
}

/** What a checkout session becomes once `customer` paid it: complete, with its subscription and first invoice. */
export function completedSessionFields (customer: Obj, subscription: string, invoice: string): Obj {
  return {
    status: 'complete',
    payment_status: 'paid',
    customer: customer.id,
    subscription,
    invoice,
    url: null,
    collected_information: { business_name: null, individual_name: null, shipping_details: null },
    customer_details: {
      address: { city: null, country: 'US', line1: null, line2: null, postal_code: '94103', state: null },
      business_name: null,
      email: customer.email ?? 'customer@example.com',
      individual_name: null,
      name: customer.name ?? null,
      phone: null,
      tax_exempt: 'none',
      tax_ids: []
    }
  }
}

export function portalSessionObject (customer: string, returnUrl: string | null, pagesUrl = PORTAL_PAGES): Obj {
  return {
    id: ids.portalSession(),
    object: 'billing_portal.session',
    configuration: ids.portalConfiguration(),
    created: now(),
    customer,
    customer_account: null,
    flow: null,
    livemode: false,
    locale: null,
    on_behalf_of: null,
    return_url: returnUrl,
    url: `${pagesUrl}/p/session/test_${randomChars(40)}`
  }
}
