// A local stand-in for the part of the Stripe API the service calls through the official
// SDK (`new Stripe(key, { host: '127.0.0.1', port, protocol: 'http', maxNetworkRetries: 0 })`).
// It parses form bodies the way Stripe does, answers Stripe-shaped objects for the API
// version the SDK pins, keeps state in memory, records every request, and can be told to
// fail (500) or hang the next requests. Besides creating things it expires checkout sessions
// (only open ones, as Stripe) and deletes customers (which cancels their subscriptions).
import { randomBytes } from 'node:crypto'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import Stripe from 'stripe'

export interface RecordedCall {
  method: string
  path: string
  params: Record<string, unknown>
  idempotencyKey?: string
  authorization?: string
}

export interface StripeStandIn {
  /** Base URL, e.g. http://127.0.0.1:54321 (what the service gets as PAYMENT_API_URL). */
  url: string
  /** Every request received, in order (also the ones answered with an error or never answered). */
  calls: RecordedCall[]
  customers: Map<string, any>
  /** Ids of deleted customers (Stripe keeps a `{id, object, deleted: true}` stub of each). */
  deletedCustomers: Set<string>
  checkoutSessions: Map<string, any>
  subscriptions: Map<string, any>
  /** The next `count` requests fail: 'error' answers 500 {error:{type:'api_error'}}, 'timeout' never answers (holds the socket until close()). */
  failNext (count: number, mode: 'error' | 'timeout'): void
  /** Simulates the customer paying for an open checkout session (throws for an expired or completed one, or a deleted customer's): creates an active subscription for its customer and price (period now → now+30 days, metadata from subscription_data), marks the session complete with `subscription` set; returns { session, subscription } (snapshots). */
  completeCheckout (sessionId: string): { session: any, subscription: any }
  /** Creates a subscription directly (status default 'active'); returns a snapshot. */
  createSubscription (opts: CreateSubscriptionOptions): any
  /** Clears calls and pending failures (not state). */
  reset (): void
  close (): Promise<void>
}

export interface CreateSubscriptionOptions {
  customer: string
  price: string
  status?: string
  metadata?: Record<string, string>
  /** Unix seconds; default now. */
  currentPeriodStart?: number
  /** Unix seconds; default currentPeriodStart + 30 days. */
  currentPeriodEnd?: number
  quantity?: number
}

type Obj = Record<string, any>

const DAY = 86_400
const PERIOD = 30 * DAY
const UNIT_AMOUNT = 1000
const CURRENCY = 'usd'
const UNSAFE_KEYS = new Set(['__proto__', 'constructor', 'prototype'])
const ALNUM = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'

const now = () => Math.floor(Date.now() / 1000)

function randomChars (length: number): string {
  const bytes = randomBytes(length)
  let out = ''
  for (const byte of bytes) out += ALNUM[byte % ALNUM.length]
  return out
}

/** Ids shaped like Stripe's: `cus_` + 14, `sub_1` + 23, `cs_test_a1` + 56, ... */
const ids = {
  customer: () => `cus_${randomChars(14)}`,
  checkoutSession: () => `cs_test_a1${randomChars(56)}`,
  portalSession: () => `bps_1${randomChars(23)}`,
  portalConfiguration: () => `bpc_1${randomChars(23)}`,
  subscription: () => `sub_1${randomChars(23)}`,
  subscriptionItem: () => `si_${randomChars(14)}`,
  invoice: () => `in_1${randomChars(23)}`,
  paymentMethod: () => `pm_1${randomChars(23)}`,
  lineItem: () => `li_1${randomChars(23)}`,
  request: () => `req_${randomChars(14)}`
}

class ApiError extends Error {
  constructor (
    readonly status: number,
    readonly type: string,
    message: string,
    readonly extra: { code?: string, param?: string } = {}
  ) {
    super(message)
  }

  body (requestId: string): Obj {
    const error: Obj = { type: this.type, message: this.message }
    if (this.extra.code) {
      error.code = this.extra.code
      error.doc_url = `https://stripe.com/docs/error-codes/${this.extra.code.replaceAll('_', '-')}`
    }
    if (this.extra.param) error.param = this.extra.param
    error.request_log_url = `https://dashboard.stripe.com/test/logs/${requestId}`
    return { error }
  }
}

const missingParam = (param: string) =>
  new ApiError(400, 'invalid_request_error', `Missing required param: ${param}.`, { code: 'parameter_missing', param })
const noSuch = (kind: string, id: string, param = 'id', status = 404) =>
  new ApiError(status, 'invalid_request_error', `No such ${kind}: '${id}'`, { code: 'resource_missing', param })
const invalid = (message: string, param?: string) =>
  new ApiError(400, 'invalid_request_error', message, param ? { param } : {})

/**
 * Parses `a[b][0][c]=x` pairs into nested objects and arrays, as Stripe does. Numeric
 * (or empty) brackets make arrays; values stay strings.
 */
function parseForm (pairs: Iterable<[string, string]>): Obj {
  const root: Obj = {}
  for (const [key, value] of pairs) {
    const match = /^([^[\]]+)((?:\[[^[\]]*\])*)$/.exec(key)
    const segments = match
      ? [match[1] as string, ...[...(match[2] ?? '').matchAll(/\[([^[\]]*)\]/g)].map((m) => m[1] as string)]
      : [key]
    if (segments.some((s) => UNSAFE_KEYS.has(s))) continue
    let node: any = root
    for (let i = 0; i < segments.length; i++) {
      let segment = segments[i] as string
      if (segment === '' && Array.isArray(node)) segment = String(node.length)
      if (i === segments.length - 1) {
        node[segment] = value
        break
      }
      const next = segments[i + 1] as string
      if (node[segment] === null || typeof node[segment] !== 'object') node[segment] = /^\d*$/.test(next) ? [] : {}
      node = node[segment]
    }
  }
  return compactArrays(root) as Obj
}

function compactArrays (value: unknown): unknown {
  if (Array.isArray(value)) return value.filter(() => true).map(compactArrays)
  if (value !== null && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) (value as Obj)[k] = compactArrays(v)
  }
  return value
}

const clone = <T>(value: T): T => structuredClone(value)

function parseBoolean (value: unknown, param: string): boolean | undefined {
  if (value === undefined) return undefined
  if (value === 'true') return true
  if (value === 'false') return false
  throw invalid(`Invalid boolean: ${String(value)}`, param)
}

function optionalString (value: unknown, param: string): string | null | undefined {
  if (value === undefined) return undefined
  if (value === '') return null
  if (typeof value !== 'string') throw invalid(`Invalid string: ${JSON.stringify(value)}`, param)
  return value
}

/** Stripe's metadata update rules: keys merge, an empty value unsets a key, `metadata=` unsets all. */
function mergeMetadata (current: Obj, update: unknown, param = 'metadata'): Obj {
  if (update === undefined) return current
  if (update === '') return {}
  if (update === null || typeof update !== 'object' || Array.isArray(update)) throw invalid('Invalid object', param)
  const merged: Obj = { ...current }
  for (const [key, value] of Object.entries(update as Obj)) {
    if (typeof value !== 'string') throw invalid(`Invalid value for metadata key '${key}': must be a string`, `${param}[${key}]`)
    if (key.length > 40) throw invalid(`Metadata keys can have up to 40 characters. Key '${key}' has ${key.length}.`, `${param}[${key}]`)
    if (value.length > 500) throw invalid(`Metadata values can have up to 500 characters, but you passed in a value that is ${value.length} characters.`, `${param}[${key}]`)
    if (value === '') delete merged[key]
    else merged[key] = value
  }
  if (Object.keys(merged).length > 50) throw invalid('You can specify up to 50 keys for metadata.', param)
  return merged
}

function expandList (value: unknown): string[] {
  if (value === undefined || value === '') return []
  if (Array.isArray(value)) return value.map(String)
  return [String(value)]
}

export async function startStripeStandIn (): Promise<StripeStandIn> {
  const calls: RecordedCall[] = []
  const customers = new Map<string, any>()
  const deletedCustomers = new Set<string>()
  const checkoutSessions = new Map<string, any>()
  const subscriptions = new Map<string, any>()
  const prices = new Map<string, any>()
  /** Line items and subscription_data of each checkout session: not part of the session object itself. */
  const sessionExtras = new Map<string, { lineItems: Obj[], subscriptionData: Obj }>()
  const idempotent = new Map<string, { method: string, path: string, fingerprint: string, status: number, body: string }>()
  const failures: Array<'error' | 'timeout'> = []
  const held = new Set<ServerResponse>()

  function price (id: string): Obj {
    let existing = prices.get(id)
    if (!existing) {
      const created = now()
      existing = {
        id,
        object: 'price',
        active: true,
        billing_scheme: 'per_unit',
        created,
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
      prices.set(id, existing)
    }
    return clone(existing)
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

  function checkPrice (id: unknown, param: string): string {
    if (typeof id !== 'string' || id === '') throw missingParam(param)
    if (!/^(price|plan)_/.test(id)) throw noSuch('price', id, param, 400)
    return id
  }

  function buildSubscription (opts: CreateSubscriptionOptions & { latestInvoice?: string | null, defaultPaymentMethod?: string | null }): Obj {
    const created = now()
    const start = opts.currentPeriodStart ?? created
    const end = opts.currentPeriodEnd ?? start + PERIOD
    const status = opts.status ?? 'active'
    const id = ids.subscription()
    const p = price(opts.price)
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
      plan: planFor(p),
      price: p,
      quantity: opts.quantity ?? 1,
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
      customer: opts.customer,
      customer_account: null,
      days_until_due: null,
      default_payment_method: opts.defaultPaymentMethod ?? null,
      default_source: null,
      default_tax_rates: [],
      description: null,
      discounts: [],
      ended_at: ended ? created : null,
      invoice_settings: { account_tax_ids: null, issuer: { type: 'self' } },
      items: { object: 'list', data: [item], has_more: false, total_count: 1, url: `/v1/subscription_items?subscription=${id}` },
      latest_invoice: opts.latestInvoice ?? null,
      livemode: false,
      managed_payments: null,
      metadata: { ...(opts.metadata ?? {}) },
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

  function createSubscription (opts: CreateSubscriptionOptions): any {
    const subscription = buildSubscription(opts)
    subscriptions.set(subscription.id, subscription)
    return clone(subscription)
  }

  function completeCheckout (sessionId: string): { session: any, subscription: any } {
    const session = checkoutSessions.get(sessionId)
    const extras = sessionExtras.get(sessionId)
    if (!session || !extras) throw new Error(`stripe stand-in: no checkout session ${sessionId}`)
    if (session.status !== 'open') throw new Error(`stripe stand-in: checkout session ${sessionId} is ${session.status}, not open`)
    if (session.mode !== 'subscription') throw new Error(`stripe stand-in: checkout session ${sessionId} is in ${session.mode} mode, not subscription`)
    const first = extras.lineItems[0]
    if (!first) throw new Error(`stripe stand-in: checkout session ${sessionId} has no line items`)
    if (session.customer && deletedCustomers.has(session.customer)) throw new Error(`stripe stand-in: the customer of checkout session ${sessionId} is deleted`)
    let customer = session.customer ? customers.get(session.customer) : undefined
    if (!customer) {
      customer = customerObject({ email: session.customer_email ?? undefined })
      customers.set(customer.id, customer)
    }
    const invoice = ids.invoice()
    const subscription = buildSubscription({
      customer: customer.id,
      price: first.price.id,
      quantity: first.quantity,
      metadata: extras.subscriptionData.metadata ?? {},
      latestInvoice: invoice,
      defaultPaymentMethod: ids.paymentMethod()
    })
    subscriptions.set(subscription.id, subscription)
    Object.assign(session, {
      status: 'complete',
      payment_status: 'paid',
      customer: customer.id,
      subscription: subscription.id,
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
    })
    return { session: clone(session), subscription: clone(subscription) }
  }

  function customerObject (params: Obj): Obj {
    const email = optionalString(params.email, 'email') ?? null
    if (email !== null && (email.length > 512 || !/^[^@\s]+@[^@\s]+\.[^@\s]+$/.test(email))) {
      throw new ApiError(400, 'invalid_request_error', `Invalid email address: ${email}`, { code: 'email_invalid', param: 'email' })
    }
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
      description: optionalString(params.description, 'description') ?? null,
      discount: null,
      email,
      invoice_prefix: randomChars(8).toUpperCase(),
      invoice_settings: { custom_fields: null, default_payment_method: null, footer: null, rendering_options: null },
      livemode: false,
      metadata: mergeMetadata({}, params.metadata),
      name: optionalString(params.name, 'name') ?? null,
      next_invoice_sequence: 1,
      phone: optionalString(params.phone, 'phone') ?? null,
      preferred_locales: [],
      shipping: null,
      tax_exempt: 'none',
      test_clock: null
    }
  }

  function createCheckoutSession (params: Obj): Obj {
    const mode = params.mode
    if (mode === undefined) throw missingParam('mode')
    if (!['payment', 'setup', 'subscription'].includes(mode)) throw invalid('Invalid mode: must be one of payment, setup, or subscription', 'mode')
    const customer = optionalString(params.customer, 'customer') ?? null
    if (customer !== null && !customers.has(customer)) throw noSuch('customer', customer, 'customer', 400)
    if (params.line_items !== undefined && !Array.isArray(params.line_items)) throw invalid('Invalid array', 'line_items')
    const rawItems: Obj[] = params.line_items ?? []
    if (mode !== 'setup' && rawItems.length === 0) {
      throw invalid(mode === 'subscription'
        ? 'You must provide at least one recurring price in `subscription` mode when using prices.'
        : 'You must provide one of `line_items`, `price_data` or `prices`.', 'line_items')
    }
    const lineItems = rawItems.map((raw, i) => {
      const p = price(checkPrice(raw?.price, `line_items[${i}][price]`))
      if (raw.quantity === undefined) throw invalid(`Quantity is required. Add \`quantity\` to \`line_items[${i}]\``, `line_items[${i}][quantity]`)
      const quantity = Number(raw.quantity)
      if (!Number.isInteger(quantity) || quantity < 0) throw invalid(`Invalid integer: ${String(raw.quantity)}`, `line_items[${i}][quantity]`)
      const amount = p.unit_amount * quantity
      return {
        id: ids.lineItem(),
        object: 'item',
        amount_discount: 0,
        amount_subtotal: amount,
        amount_tax: 0,
        amount_total: amount,
        currency: CURRENCY,
        description: 'Pro',
        price: p,
        quantity
      }
    })
    const subscriptionData: Obj = params.subscription_data ?? {}
    if (subscriptionData === null || typeof subscriptionData !== 'object' || Array.isArray(subscriptionData)) throw invalid('Invalid object', 'subscription_data')
    if (mode !== 'subscription' && params.subscription_data !== undefined) {
      throw invalid('You can only specify `subscription_data` in `subscription` mode.', 'subscription_data')
    }
    subscriptionData.metadata = mergeMetadata({}, subscriptionData.metadata, 'subscription_data[metadata]')
    const clientReferenceId = optionalString(params.client_reference_id, 'client_reference_id') ?? null
    if (clientReferenceId !== null && clientReferenceId.length > 200) throw invalid('client_reference_id must be at most 200 characters', 'client_reference_id')
    const id = ids.checkoutSession()
    const created = now()
    const total = lineItems.reduce((sum, item) => sum + item.amount_total, 0)
    const session = {
      id,
      object: 'checkout.session',
      adaptive_pricing: { enabled: false },
      after_expiration: null,
      allow_promotion_codes: parseBoolean(params.allow_promotion_codes, 'allow_promotion_codes') ?? null,
      amount_subtotal: total,
      amount_total: total,
      automatic_tax: { enabled: false, liability: null, provider: null, status: null },
      billing_address_collection: params.billing_address_collection ?? null,
      cancel_url: optionalString(params.cancel_url, 'cancel_url') ?? null,
      client_reference_id: clientReferenceId,
      client_secret: null,
      collected_information: null,
      consent: null,
      consent_collection: null,
      created,
      currency: CURRENCY,
      currency_conversion: null,
      custom_fields: [],
      custom_text: { after_submit: null, shipping_address: null, submit: null, terms_of_service_acceptance: null },
      customer,
      customer_account: null,
      customer_creation: customer === null ? 'always' : null,
      customer_details: null,
      customer_email: optionalString(params.customer_email, 'customer_email') ?? null,
      discounts: [],
      expires_at: created + DAY,
      integration_identifier: null,
      invoice: null,
      invoice_creation: null,
      livemode: false,
      locale: params.locale ?? null,
      managed_payments: null,
      metadata: mergeMetadata({}, params.metadata),
      mode,
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
      success_url: optionalString(params.success_url, 'success_url') ?? null,
      total_details: { amount_discount: 0, amount_shipping: 0, amount_tax: 0 },
      ui_mode: 'hosted_page',
      url: `https://checkout.stripe.test/c/pay/${id}`,
      wallet_options: null
    }
    checkoutSessions.set(id, session)
    sessionExtras.set(id, { lineItems, subscriptionData })
    return session
  }

  function createPortalSession (params: Obj): Obj {
    const customer = optionalString(params.customer, 'customer')
    if (!customer) throw missingParam('customer')
    if (!customers.has(customer)) throw noSuch('customer', customer, 'customer', 400)
    const id = ids.portalSession()
    return {
      id,
      object: 'billing_portal.session',
      configuration: ids.portalConfiguration(),
      created: now(),
      customer,
      customer_account: null,
      flow: null,
      livemode: false,
      locale: params.locale ?? null,
      on_behalf_of: null,
      return_url: optionalString(params.return_url, 'return_url') ?? null,
      url: `https://billing.stripe.test/p/session/test_${randomChars(40)}`
    }
  }

  function updateSubscription (subscription: Obj, params: Obj): Obj {
    const changing = Object.keys(params).filter((k) => !['expand', 'metadata', 'cancellation_details'].includes(k))
    if (subscription.status === 'canceled' && changing.length > 0) {
      throw invalid('A canceled subscription can only update its cancellation_details and metadata.')
    }
    const cancelAtPeriodEnd = parseBoolean(params.cancel_at_period_end, 'cancel_at_period_end')
    const metadata = mergeMetadata(subscription.metadata, params.metadata)
    subscription.metadata = metadata
    if (params.cancellation_details !== undefined) {
      const details = params.cancellation_details
      if (details === null || typeof details !== 'object') throw invalid('Invalid object', 'cancellation_details')
      if (details.comment !== undefined) subscription.cancellation_details.comment = details.comment || null
      if (details.feedback !== undefined) subscription.cancellation_details.feedback = details.feedback || null
    }
    if (cancelAtPeriodEnd === true) {
      const periodEnd = Math.max(...subscription.items.data.map((item: Obj) => item.current_period_end))
      Object.assign(subscription, { cancel_at_period_end: true, cancel_at: periodEnd, canceled_at: now() })
      subscription.cancellation_details.reason = 'cancellation_requested'
    } else if (cancelAtPeriodEnd === false) {
      Object.assign(subscription, { cancel_at_period_end: false, cancel_at: null, canceled_at: null })
      subscription.cancellation_details = { comment: null, feedback: null, reason: null }
    }
    return subscription
  }

  function cancelSubscription (subscription: Obj, params: Obj): Obj {
    if (subscription.status === 'canceled') throw noSuch('subscription', subscription.id)
    const at = now()
    const details = params.cancellation_details
    Object.assign(subscription, {
      status: subscription.status === 'incomplete' ? 'incomplete_expired' : 'canceled',
      canceled_at: at,
      ended_at: at,
      cancellation_details: {
        comment: details?.comment || null,
        feedback: details?.feedback || null,
        reason: 'cancellation_requested'
      }
    })
    return subscription
  }

  /** Stripe: "A Checkout Session can be expired when it is in one of these statuses: open". */
  function expireCheckoutSession (session: Obj): Obj {
    if (session.status !== 'open') {
      throw invalid(`Only Checkout Sessions with a status in ["open"] can be expired. This Checkout Session has a status of \`${String(session.status)}\`.`)
    }
    Object.assign(session, { status: 'expired', url: null })
    return session
  }

  /** Stripe: permanently deletes a customer and "immediately cancels any active subscriptions on the customer". */
  function deleteCustomer (customer: Obj): Obj {
    for (const subscription of subscriptions.values()) {
      if (subscription.customer === customer.id && subscription.status !== 'canceled' && subscription.status !== 'incomplete_expired') {
        cancelSubscription(subscription, {})
      }
    }
    customers.delete(customer.id)
    deletedCustomers.add(customer.id)
    return { id: customer.id, object: 'customer', deleted: true }
  }

  function listSubscriptions (params: Obj): Obj {
    const status = params.status ?? undefined
    const limit = params.limit === undefined ? 10 : Number(params.limit)
    if (!Number.isInteger(limit) || limit < 1 || limit > 100) throw invalid('Invalid integer: limit must be between 1 and 100', 'limit')
    let all = [...subscriptions.values()].reverse()
    if (params.customer) all = all.filter((s) => s.customer === params.customer)
    if (params.price) all = all.filter((s) => s.items.data.some((item: Obj) => item.price.id === params.price))
    if (status === undefined) all = all.filter((s) => s.status !== 'canceled' && s.status !== 'incomplete_expired')
    else if (status === 'ended') all = all.filter((s) => s.status === 'canceled' || s.status === 'incomplete_expired')
    else if (status !== 'all') all = all.filter((s) => s.status === status)
    if (params.starting_after) {
      const index = all.findIndex((s) => s.id === params.starting_after)
      if (index < 0) throw noSuch('subscription', String(params.starting_after), 'starting_after', 400)
      all = all.slice(index + 1)
    }
    return { object: 'list', data: all.slice(0, limit), has_more: all.length > limit, url: '/v1/subscriptions' }
  }

  /** `expand[]` on the paths our objects can expand: ids of customers, subscriptions and sessions, and a session's line_items. */
  function expand (object: Obj, paths: string[]): Obj {
    const result = clone(object)
    for (const path of paths) {
      const segments = path.split('.')
      const head = segments[0] as string
      if (result.object === 'checkout.session' && head === 'line_items') {
        const items = sessionExtras.get(result.id)?.lineItems ?? []
        result.line_items = { object: 'list', data: clone(items), has_more: false, url: `/v1/checkout/sessions/${result.id}/line_items` }
        continue
      }
      if (!(head in result)) throw invalid(`This property cannot be expanded (${path}).`, 'expand')
      expandAt(result, segments)
    }
    return result
  }

  function expandAt (node: any, segments: string[]): void {
    if (node === null || typeof node !== 'object') return
    const [head, ...rest] = segments
    if (head === undefined) return
    if (Array.isArray(node[head]) && rest.length > 0) {
      for (const entry of node[head]) expandAt(entry, rest)
      return
    }
    if (rest.length > 0) {
      expandAt(node[head], rest)
      return
    }
    const value = node[head]
    if (typeof value !== 'string') return
    const found = value.startsWith('cus_')
      ? customers.get(value)
      : value.startsWith('sub_') ? subscriptions.get(value) : value.startsWith('cs_') ? checkoutSessions.get(value) : undefined
    if (found) node[head] = clone(found)
  }

  function route (method: string, path: string, params: Obj): Obj {
    const expansions = expandList(params.expand)
    const respond = (object: Obj) => expand(object, expansions)
    let m: RegExpExecArray | null
    if (path === '/v1/customers' && method === 'POST') {
      const customer = customerObject(params)
      customers.set(customer.id, customer)
      return respond(customer)
    }
    if ((m = /^\/v1\/customers\/([^/]+)$/.exec(path))) {
      const id = decodeURIComponent(m[1] as string)
      // A deleted customer can still be read (as a stub), and nothing else.
      if (deletedCustomers.has(id) && method === 'GET') return { id, object: 'customer', deleted: true }
      const customer = customers.get(id)
      if (!customer) throw noSuch('customer', id)
      if (method === 'GET') return respond(customer)
      if (method === 'DELETE') return deleteCustomer(customer)
      if (method === 'POST') {
        const updates = customerObject({ ...params, metadata: undefined })
        for (const key of ['email', 'name', 'description', 'phone'] as const) {
          if (params[key] !== undefined) customer[key] = updates[key]
        }
        customer.metadata = mergeMetadata(customer.metadata, params.metadata)
        return respond(customer)
      }
    }
    if (path === '/v1/checkout/sessions' && method === 'POST') return respond(createCheckoutSession(params))
    if ((m = /^\/v1\/checkout\/sessions\/([^/]+)\/expire$/.exec(path)) && method === 'POST') {
      const id = decodeURIComponent(m[1] as string)
      const session = checkoutSessions.get(id)
      if (!session) throw noSuch('checkout.session', id)
      return respond(expireCheckoutSession(session))
    }
    if ((m = /^\/v1\/checkout\/sessions\/([^/]+)(\/line_items)?$/.exec(path)) && method === 'GET') {
      const id = decodeURIComponent(m[1] as string)
      const session = checkoutSessions.get(id)
      if (!session) throw noSuch('checkout.session', id)
      if (m[2]) return { object: 'list', data: clone(sessionExtras.get(id)?.lineItems ?? []), has_more: false, url: `/v1/checkout/sessions/${id}/line_items` }
      return respond(session)
    }
    if (path === '/v1/billing_portal/sessions' && method === 'POST') return respond(createPortalSession(params))
    if (path === '/v1/subscriptions' && method === 'GET') {
      const list = listSubscriptions(params)
      list.data = list.data.map((s: Obj) => expand(s, expansions.filter((p) => p.startsWith('data.')).map((p) => p.slice(5))))
      return list
    }
    if ((m = /^\/v1\/subscriptions\/([^/]+)$/.exec(path))) {
      const id = decodeURIComponent(m[1] as string)
      const subscription = subscriptions.get(id)
      if (!subscription) throw noSuch('subscription', id)
      if (method === 'GET') return respond(subscription)
      if (method === 'POST') return respond(updateSubscription(subscription, params))
      if (method === 'DELETE') return respond(cancelSubscription(subscription, params))
    }
    throw new ApiError(404, 'invalid_request_error',
      `Unrecognized request URL (${method}: ${path}). Please see https://stripe.com/docs or we can help at https://support.stripe.com/.`)
  }

  function checkAuth (header: string | undefined): void {
    if (!header) {
      throw new ApiError(401, 'invalid_request_error',
        "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY'). See https://stripe.com/docs/api#authentication for details, or we can help at https://support.stripe.com/.")
    }
    const key = /^Bearer (\S+)$/.exec(header)?.[1]
    if (!key || !/^sk_test_\w+$/.test(key)) {
      const shown = key ? `${key.slice(0, 8)}${'*'.repeat(Math.max(0, key.length - 12))}${key.slice(-4)}` : header
      throw new ApiError(401, 'invalid_request_error', `Invalid API Key provided: ${shown}`, { code: 'api_key_invalid' })
    }
  }

  function send (res: ServerResponse, status: number, body: string, headers: Record<string, string>): void {
    res.writeHead(status, {
      'content-type': 'application/json',
      'content-length': String(Buffer.byteLength(body)),
      'cache-control': 'no-cache, no-store',
      ...headers
    })
    res.end(body)
  }

  async function handle (req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    const raw = Buffer.concat(chunks).toString('utf8')
    const url = new URL(req.url ?? '/', 'http://stand-in.invalid')
    const method = (req.method ?? 'GET').toUpperCase()
    const path = url.pathname
    const requestId = ids.request()
    const headers: Record<string, string> = { 'request-id': requestId, 'stripe-version': String(req.headers['stripe-version'] ?? Stripe.API_VERSION) }
    const idempotencyKey = typeof req.headers['idempotency-key'] === 'string' ? req.headers['idempotency-key'] : undefined
    const authorization = req.headers.authorization
    let params: Obj
    try {
      params = { ...parseForm(url.searchParams), ...parseForm(new URLSearchParams(raw)) }
    } catch {
      params = {}
    }
    const call: RecordedCall = { method, path, params }
    if (idempotencyKey !== undefined) call.idempotencyKey = idempotencyKey
    if (authorization !== undefined) call.authorization = authorization
    calls.push(call)

    const failure = failures.shift()
    if (failure === 'timeout') {
      held.add(res)
      res.on('close', () => held.delete(res))
      return
    }
    if (failure === 'error') {
      send(res, 500, JSON.stringify({
        error: { type: 'api_error', message: 'An unknown error occurred', request_log_url: `https://dashboard.stripe.com/test/logs/${requestId}` }
      }, null, 2), headers)
      return
    }

    try {
      checkAuth(authorization)
      if (idempotencyKey !== undefined && method === 'POST') {
        headers['idempotency-key'] = idempotencyKey
        const fingerprint = JSON.stringify(params)
        const previous = idempotent.get(idempotencyKey)
        if (previous) {
          if (previous.method !== method || previous.path !== path || previous.fingerprint !== fingerprint) {
            throw new ApiError(400, 'idempotency_error',
              `Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '${idempotencyKey}' if you meant to execute a different request.`)
          }
          send(res, previous.status, previous.body, { ...headers, 'idempotent-replayed': 'true' })
          return
        }
        const body = JSON.stringify(route(method, path, clone(params)), null, 2)
        idempotent.set(idempotencyKey, { method, path, fingerprint, status: 200, body })
        send(res, 200, body, headers)
        return
      }
      send(res, 200, JSON.stringify(route(method, path, clone(params)), null, 2), headers)
    } catch (error) {
      if (error instanceof ApiError) {
        send(res, error.status, JSON.stringify(error.body(requestId), null, 2), headers)
        return
      }
      send(res, 500, JSON.stringify({ error: { type: 'api_error', message: `stand-in failure: ${(error as Error).message}` } }, null, 2), headers)
    }
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (!res.headersSent) send(res, 500, JSON.stringify({ error: { type: 'api_error', message: String(error) } }), {})
    })
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject)
      resolve()
    })
  })
  const { port } = server.address() as AddressInfo
  let closed: Promise<void> | undefined

  return {
    url: `http://127.0.0.1:${port}`,
    calls,
    customers,
    deletedCustomers,
    checkoutSessions,
    subscriptions,
    failNext (count: number, mode: 'error' | 'timeout') {
      for (let i = 0; i < count; i++) failures.push(mode)
    },
    completeCheckout,
    createSubscription,
    reset () {
      calls.length = 0
      failures.length = 0
    },
    close () {
      closed ??= new Promise<void>((resolve) => {
        for (const res of held) res.socket?.destroy()
        held.clear()
        server.close(() => resolve())
        server.closeAllConnections()
      })
      return closed
    }
  }
}
