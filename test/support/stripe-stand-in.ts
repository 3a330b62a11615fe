// A local stand-in for the Stripe API calls the service makes (billing/stripe-provider.ts, via
// PAYMENT_API_URL): their state in memory, Stripe's answers and errors, every request recorded,
// failures and slowness on demand; on request, Stripe's hosted checkout and portal pages too
// (npm run stripe:dev). The routes are here; HTTP, objects, form parsing, pages in
// test/support/stripe-stand-in/.
import { ApiError, invalid, missingParam, noSuch } from './stripe-stand-in/errors.js'
import { optionalString, parseBoolean, readMetadata, rejectUnknown } from './stripe-stand-in/form.js'
import { hostedPages, type HostedActions, type HostedPagesOptions } from './stripe-stand-in/hosted-pages.js'
import { serve, type Failure, type PendingFailure, type PendingHold, type RequestMatch, type Route } from './stripe-stand-in/http.js'
import { ids, now } from './stripe-stand-in/ids.js'
import {
  checkoutSessionObject, completedSessionFields, customerObject, portalSessionObject, priceObject, subscriptionObject
} from './stripe-stand-in/objects.js'

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
  /**
   * The next `count` requests (of those `only` names: a method and an exact path or a
   * pattern; default any) fail: 'error' answers 500 {error:{type:'api_error'}}, 'timeout'
   * never answers (holds the socket until close()), 'refusal' answers 400
   * {error:{type:'invalid_request_error'}} with no code (a request Stripe will not carry out).
   */
  failNext (count: number, mode: Failure, only?: RequestMatch): void
  /**
   * A slow provider, as slow as the test wants: the next request `only` names is recorded at
   * once and carried out (and answered) when the test releases it; close() lets it go unanswered.
   */
  holdNext (only: RequestMatch): Hold
  /** Simulates the customer paying for an open checkout session (throws for an expired or completed one, or a deleted customer's): creates an active subscription for its customer and price (period now → now+30 days, metadata from subscription_data), marks the session complete with `subscription` set; returns { session, subscription } (snapshots). */
  completeCheckout (sessionId: string): { session: any, subscription: any }
  /** Creates a subscription directly (status default 'active'); returns a snapshot. */
  createSubscription (opts: CreateSubscriptionOptions): any
  /** Clears calls, pending failures and holds not yet taken (not state). */
  reset (): void
  close (): Promise<void>
}

export interface Hold {
  /** Resolves when the request has arrived (and is being held). */
  arrived: Promise<void>
  /** Arrived, not yet released, and its client still waits for the answer. */
  readonly pending: boolean
  release (): void
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

export interface StripeStandInOptions {
  /** Default 0: a free port. */
  port?: number
  /**
   * Serve the checkout and portal pages at the session URLs (else they name hosts nobody
   * serves), their buttons delivering the events to this webhook.
   */
  hostedPages?: HostedPagesOptions
}

type Obj = Record<string, any>

export async function startStripeStandIn (options: StripeStandInOptions = {}): Promise<StripeStandIn> {
  const calls: RecordedCall[] = []
  const failures: PendingFailure[] = []
  const holds: PendingHold[] = []
  const customers = new Map<string, any>()
  const deletedCustomers = new Set<string>()
  const checkoutSessions = new Map<string, any>()
  const subscriptions = new Map<string, any>()
  const prices = new Map<string, any>()
  /** Portal sessions by their URL's path (Stripe keeps none retrievable; the hosted portal page needs them). */
  const portalSessions = new Map<string, any>()
  /** The base URL of the hosted pages, once the server listens, when it serves them. */
  let pagesUrl: string | undefined
  /** What a checkout session was opened for; not part of the session object itself. */
  const sessionExtras = new Map<string, { price: Obj, quantity: number, subscriptionMetadata: Obj }>()

  function price (id: string): Obj {
    let existing = prices.get(id)
    if (!existing) prices.set(id, existing = priceObject(id))
    return structuredClone(existing)
  }

  function createSubscription (opts: CreateSubscriptionOptions & { latestInvoice?: string, defaultPaymentMethod?: string }): any {
    const subscription = subscriptionObject({ ...opts, price: price(opts.price) })
    subscriptions.set(subscription.id, subscription)
    return structuredClone(subscription)
  }

  function completeCheckout (sessionId: string): { session: any, subscription: any } {
    const session = checkoutSessions.get(sessionId)
    const extras = sessionExtras.get(sessionId)
    if (!session || !extras) throw new Error(`stripe stand-in: no checkout session ${sessionId}`)
    if (session.status !== 'open') throw new Error(`stripe stand-in: checkout session ${sessionId} is ${session.status}, not open`)
    if (session.customer && deletedCustomers.has(session.customer)) throw new Error(`stripe stand-in: the customer of checkout session ${sessionId} is deleted`)
    const customer = session.customer ? customers.get(session.customer) : undefined
    if (!customer) throw new Error(`stripe stand-in: checkout session ${sessionId} has no customer (the service always opens one for a customer)`)
    const invoice = ids.invoice()
    const subscription = createSubscription({
      customer: customer.id,
      price: extras.price.id,
      quantity: extras.quantity,
      metadata: extras.subscriptionMetadata,
      latestInvoice: invoice,
      defaultPaymentMethod: ids.paymentMethod()
    })
    Object.assign(session, completedSessionFields(customer, subscription.id, invoice))
    return { session: structuredClone(session), subscription }
  }

  function createCustomer (params: Obj): Obj {
    const email = optionalString(params.email, 'email') ?? null
    if (email !== null && (email.length > 512 || !/^[^@\s]+@[^@\s]+\.[^@\s]+$/.test(email))) {
      throw new ApiError(400, 'invalid_request_error', `Invalid email address: ${email}`, { code: 'email_invalid', param: 'email' })
    }
    const customer = customerObject({ email, metadata: readMetadata(params.metadata) })
    customers.set(customer.id, customer)
    return customer
  }

  /** Stripe: permanently deletes a customer and "immediately cancels any active subscriptions on the customer". */
  function deleteCustomer (customer: Obj): Obj {
    for (const subscription of subscriptions.values()) {
      if (subscription.customer === customer.id && !['canceled', 'incomplete_expired'].includes(subscription.status)) cancelSubscription(subscription)
    }
    customers.delete(customer.id)
    deletedCustomers.add(customer.id)
    return { id: customer.id, object: 'customer', deleted: true }
  }

  /** Subscription mode only, one recurring price per line item (the first one is what completeCheckout subscribes to). */
  function createCheckoutSession (params: Obj): Obj {
    if (params.mode === undefined) throw missingParam('mode')
    if (params.mode !== 'subscription') throw invalid('Invalid mode: the stand-in implements only subscription', 'mode')
    const customer = optionalString(params.customer, 'customer') ?? null
    if (customer !== null && !customers.has(customer)) throw noSuch('customer', customer, 'customer', 400)
    if (params.line_items !== undefined && !Array.isArray(params.line_items)) throw invalid('Invalid array', 'line_items')
    const rawItems: Obj[] = params.line_items ?? []
    if (rawItems.length === 0) throw invalid('You must provide at least one recurring price in `subscription` mode when using prices.', 'line_items')
    const lineItems = rawItems.map((raw, i) => {
      const id = raw?.price
      if (typeof id !== 'string' || id === '') throw missingParam(`line_items[${i}][price]`)
      if (!/^(price|plan)_/.test(id)) throw noSuch('price', id, `line_items[${i}][price]`, 400)
      if (raw.quantity === undefined) throw invalid(`Quantity is required. Add \`quantity\` to \`line_items[${i}]\``, `line_items[${i}][quantity]`)
      const quantity = Number(raw.quantity)
      if (!Number.isInteger(quantity) || quantity < 0) throw invalid(`Invalid integer: ${String(raw.quantity)}`, `line_items[${i}][quantity]`)
      return { price: price(id), quantity }
    })
    const subscriptionData: Obj = params.subscription_data ?? {}
    if (subscriptionData === null || typeof subscriptionData !== 'object' || Array.isArray(subscriptionData)) throw invalid('Invalid object', 'subscription_data')
    rejectUnknown(subscriptionData, ['metadata'], 'subscription_data')
    const clientReferenceId = optionalString(params.client_reference_id, 'client_reference_id') ?? null
    if (clientReferenceId !== null && clientReferenceId.length > 200) throw invalid('client_reference_id must be at most 200 characters', 'client_reference_id')
    const session = checkoutSessionObject({
      customer,
      total: lineItems.reduce((sum, item) => sum + item.price.unit_amount * item.quantity, 0),
      clientReferenceId,
      metadata: readMetadata(params.metadata),
      successUrl: optionalString(params.success_url, 'success_url') ?? null,
      cancelUrl: optionalString(params.cancel_url, 'cancel_url') ?? null,
      ...(pagesUrl !== undefined && { pagesUrl })
    })
    const first = lineItems[0] as { price: Obj, quantity: number }
    checkoutSessions.set(session.id, session)
    sessionExtras.set(session.id, { ...first, subscriptionMetadata: readMetadata(subscriptionData.metadata, 'subscription_data[metadata]') })
    return session
  }

  /** Stripe: "A Checkout Session can be expired when it is in one of these statuses: open". */
  function expireCheckoutSession (session: Obj): Obj {
    if (session.status !== 'open') {
      throw invalid(`Only Checkout Sessions with a status in ["open"] can be expired. This Checkout Session has a status of \`${String(session.status)}\`.`)
    }
    Object.assign(session, { status: 'expired', url: null })
    return session
  }

  function createPortalSession (params: Obj): Obj {
    const customer = optionalString(params.customer, 'customer')
    if (!customer) throw missingParam('customer')
    if (!customers.has(customer)) throw noSuch('customer', customer, 'customer', 400)
    const session = portalSessionObject(customer, optionalString(params.return_url, 'return_url') ?? null, pagesUrl)
    portalSessions.set(new URL(session.url).pathname, session)
    return session
  }

  function updateSubscription (subscription: Obj, params: Obj): Obj {
    if (subscription.status === 'canceled' && Object.keys(params).length > 0) {
      throw invalid('A canceled subscription can only update its cancellation_details and metadata.')
    }
    const cancelAtPeriodEnd = parseBoolean(params.cancel_at_period_end, 'cancel_at_period_end')
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

  /**
   * Stripe answers a cancel of a subscription that has ended with 404 `resource_missing`, "No
   * such subscription" (an ended subscription is "akin to being deleted": Stripe's answer in
   * stripe/stripe-go#1887), though it can still be retrieved.
   */
  function cancelSubscription (subscription: Obj): Obj {
    if (['canceled', 'incomplete_expired'].includes(subscription.status)) throw noSuch('subscription', subscription.id)
    const at = now()
    Object.assign(subscription, {
      status: subscription.status === 'incomplete' ? 'incomplete_expired' : 'canceled',
      canceled_at: at,
      ended_at: at,
      cancellation_details: { comment: null, feedback: null, reason: 'cancellation_requested' }
    })
    return subscription
  }

  /** The stored object `id` names, or Stripe's 404. */
  function find (map: Map<string, any>, kind: string, id: string): Obj {
    const found = map.get(id)
    if (!found) throw noSuch(kind, id)
    return found
  }

  // The service's calls and nothing else: [method, path, the parameters it sends, answer(params, id in the path)].
  const routes: Array<[string, RegExp, string[], (params: Obj, id: string) => Obj]> = [
    ['POST', /^\/v1\/customers$/, ['email', 'metadata'], createCustomer],
    ['DELETE', /^\/v1\/customers\/([^/]+)$/, [], (_, id) => deleteCustomer(find(customers, 'customer', id))],
    ['POST', /^\/v1\/checkout\/sessions$/,
      ['mode', 'customer', 'line_items', 'client_reference_id', 'metadata', 'subscription_data', 'success_url', 'cancel_url'], createCheckoutSession],
    ['GET', /^\/v1\/checkout\/sessions\/([^/]+)$/, [], (_, id) => find(checkoutSessions, 'checkout.session', id)],
    ['POST', /^\/v1\/checkout\/sessions\/([^/]+)\/expire$/, [], (_, id) => expireCheckoutSession(find(checkoutSessions, 'checkout.session', id))],
    ['POST', /^\/v1\/billing_portal\/sessions$/, ['customer', 'return_url'], createPortalSession],
    ['GET', /^\/v1\/subscriptions\/([^/]+)$/, [], (_, id) => find(subscriptions, 'subscription', id)],
    ['POST', /^\/v1\/subscriptions\/([^/]+)$/, ['cancel_at_period_end'], (params, id) => updateSubscription(find(subscriptions, 'subscription', id), params)],
    ['DELETE', /^\/v1\/subscriptions\/([^/]+)$/, [], (_, id) => cancelSubscription(find(subscriptions, 'subscription', id))]
  ]

  const route: Route = (method, path, params) => {
    for (const [routeMethod, pattern, known, answer] of routes) {
      const match = pattern.exec(path)
      if (!match || method !== routeMethod) continue
      rejectUnknown(params, known)
      return answer(params, decodeURIComponent(match[1] ?? ''))
    }
    throw new ApiError(404, 'invalid_request_error',
      `Unrecognized request URL (${method}: ${path}). Please see https://stripe.com/docs or we can help at https://support.stripe.com/.`)
  }

  const actions: HostedActions = {
    checkoutSession: (id) => checkoutSessions.get(id),
    completeCheckout,
    portalSession: (path) => portalSessions.get(path),
    customer: (id) => customers.get(id),
    subscriptionsOf: (customer) => [...subscriptions.values()].filter((s) => s.customer === customer),
    cancelAtPeriodEnd (id) {
      const subscription = find(subscriptions, 'subscription', id)
      const previous = { cancel_at_period_end: subscription.cancel_at_period_end, cancel_at: subscription.cancel_at, canceled_at: subscription.canceled_at }
      return { subscription: structuredClone(updateSubscription(subscription, { cancel_at_period_end: 'true' })), previous }
    },
    cancelNow: (id) => structuredClone(cancelSubscription(find(subscriptions, 'subscription', id)))
  }
  const pages = options.hostedPages && hostedPages(actions, options.hostedPages)
  const server = await serve(route, calls, failures, holds, { ...(options.port !== undefined && { port: options.port }), ...(pages && { pages }) })
  if (pages) pagesUrl = server.url
  return {
    url: server.url,
    calls,
    customers,
    deletedCustomers,
    checkoutSessions,
    subscriptions,
    failNext (count: number, mode: Failure, only: RequestMatch = {}) {
      for (let i = 0; i < count; i++) failures.push({ ...only, mode })
    },
    holdNext (only: RequestMatch): Hold {
      let arrive = () => {}
      let release = () => {}
      const arrived = new Promise<void>((resolve) => { arrive = resolve })
      const released = new Promise<void>((resolve) => { release = resolve })
      const hold: PendingHold = {
        ...only,
        state: 'waiting',
        arrive,
        released,
        release () {
          hold.state = 'released'
          release()
        }
      }
      holds.push(hold)
      return {
        arrived,
        get pending () { return hold.state === 'holding' },
        release: () => hold.release()
      }
    },
    completeCheckout,
    createSubscription,
    reset () {
      calls.length = 0
      failures.length = 0
      for (const hold of holds.splice(0)) hold.release()
    },
    close: server.close
  }
}
