// The PaymentProvider (billing/provider.ts) for Stripe: the one place that talks to it, and
// with billing/stripe-events.ts the only code that knows its SDK. Provider failures become 502
// `Payment provider error`, logged with the provider's request id, never the key; the error
// carries whether the provider refused the request for good (providerFailureOf), for the
// callers that retry. Without a webhook secret, webhook verification refuses with 503
// `Billing is not configured`. With tracing on (plugins/tracing.ts), each call is a
// client span of the request that made it.
import { randomUUID } from 'node:crypto'
import type Stripe from 'stripe'
import { SpanKind, SpanStatusCode, type Attributes, type Tracer, type TracerProvider } from '@opentelemetry/api'
import { ATTR_ERROR_TYPE, ATTR_HTTP_RESPONSE_STATUS_CODE, ATTR_SERVER_ADDRESS, ATTR_SERVER_PORT } from '@opentelemetry/semantic-conventions'
import { BillingNotConfiguredError, InvalidSignatureError, PaymentProviderError } from '../errors.js'
import type { BillingLog, PaymentProvider, ProviderFailure } from './provider.js'
import { isEnded } from './rules.js'

export interface StripeProviderOptions {
  secretKey: string
  /** Where the API is, when not Stripe's (a stand-in in tests). */
  apiUrl?: string
  timeoutMs: number
  maxNetworkRetries: number
  /** Where the billing portal returns the user. */
  appUrl: string
  /** Without it, webhook deliveries are refused with 503. */
  webhookSecret?: string
  /** Where provider failures are logged. */
  log: BillingLog
  /** With tracing on: a client span per call, in this module's instrumentation scope. */
  tracerProvider?: TracerProvider
}

type StripeSdk = typeof Stripe

/**
 * Stripe's SDK and our reading of its objects (stripe-events.ts, with TypeBox's value
 * checker), loaded by the first provider call or webhook delivery rather than at start-up,
 * where they were ~0.3 s of the time to the first answer (issue 34).
 */
let loaded: Promise<{ Stripe: StripeSdk, events: typeof import('./stripe-events.js') }> | undefined
const loadStripe = () => (loaded ??= Promise.all([import('stripe'), import('./stripe-events.js')])
  .then(([sdk, events]) => ({ Stripe: sdk.default, events })))

function stripeClientOptions (apiUrl: string | undefined, timeout: number, maxNetworkRetries: number): Stripe.StripeConfig {
  const options: Stripe.StripeConfig = { timeout, maxNetworkRetries, appInfo: { name: 'task-subscription-backend' } }
  if (apiUrl) {
    const url = new URL(apiUrl)
    options.host = url.hostname
    options.port = url.port || (url.protocol === 'https:' ? 443 : 80)
    options.protocol = url.protocol === 'http:' ? 'http' : 'https'
  }
  return options
}

const isMissing = (Stripe: StripeSdk, err: unknown): boolean => err instanceof Stripe.errors.StripeInvalidRequestError && err.code === 'resource_missing'

/** Where a span says the calls went: PAYMENT_API_URL's host and port, or Stripe's. */
function providerAddress (apiUrl: string | undefined): Attributes {
  if (apiUrl === undefined) return { [ATTR_SERVER_ADDRESS]: 'api.stripe.com', [ATTR_SERVER_PORT]: 443 }
  const url = new URL(apiUrl)
  return { [ATTR_SERVER_ADDRESS]: url.hostname, [ATTR_SERVER_PORT]: Number(url.port || (url.protocol === 'https:' ? 443 : 80)) }
}

/**
 * With tracing on, a client span per provider call (retries included), named after the
 * operation, saying where it went and, when it failed, the provider's error type and status:
 * never a key, a customer's data or what was sent.
 */
function traced<T> (Stripe: StripeSdk, tracer: Tracer | undefined, address: Attributes, operation: string, fn: () => Promise<T>): Promise<T> {
  if (tracer === undefined) return fn()
  return tracer.startActiveSpan(`stripe ${operation}`, {
    kind: SpanKind.CLIENT,
    attributes: { 'payment.provider': 'stripe', 'payment.operation': operation, ...address }
  }, async (span) => {
    try {
      return await fn()
    } catch (err) {
      const failure = err instanceof Stripe.errors.StripeError ? err : undefined
      span.setAttribute(ATTR_ERROR_TYPE, failure?.rawType ?? failure?.type ?? (err as Error).constructor?.name ?? 'Error')
      if (failure?.statusCode !== undefined) span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, failure.statusCode)
      span.setStatus({ code: SpanStatusCode.ERROR })
      throw err
    } finally {
      span.end()
    }
  })
}

async function call<T> (Stripe: StripeSdk, log: BillingLog, operation: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn()
  } catch (err) {
    if (err instanceof Stripe.errors.StripeError) {
      log.error({ operation, providerRequestId: err.requestId, type: err.type, code: err.code, statusCode: err.statusCode }, 'payment provider error')
      const providerFailure: ProviderFailure = {
        refused: err instanceof Stripe.errors.StripeInvalidRequestError,
        detail: [operation, err.rawType ?? err.type, err.code, err.statusCode, err.requestId].filter((part) => part !== undefined && part !== null).join(' ')
      }
      throw Object.assign(new PaymentProviderError(), { providerFailure })
    }
    throw err
  }
}

interface Sdk { Stripe: StripeSdk, events: typeof import('./stripe-events.js'), stripe: Stripe }

export function createStripeProvider ({ secretKey, apiUrl, timeoutMs, maxNetworkRetries, appUrl, webhookSecret, log, tracerProvider }: StripeProviderOptions): PaymentProvider {
  const tracer = tracerProvider?.getTracer('task-subscription-backend/billing/stripe-provider')
  let client: Promise<Sdk> | undefined
  const sdk = () => (client ??= loadStripe().then(({ Stripe, events }) =>
    ({ Stripe, events, stripe: new Stripe(secretKey, stripeClientOptions(apiUrl, timeoutMs, maxNetworkRetries)) })))
  const address = providerAddress(apiUrl)
  const portalReturnUrl = appUrl.replace(/\/+$/, '')
  const provider = <T>(operation: string, fn: (sdk: Sdk) => Promise<T>): Promise<T> =>
    sdk().then((loadedSdk) => traced(loadedSdk.Stripe, tracer, address, operation, () => call(loadedSdk.Stripe, log, operation, () => fn(loadedSdk))))

  return {
    ensureConfigured: () => {},

    createCustomer: (user) => provider('customers.create', async ({ stripe }) => {
      // A stable key: two quick clicks create one customer at the provider.
      const customer = await stripe.customers.create(
        { email: user.email, metadata: { userId: user.id } },
        { idempotencyKey: `customer-create-${user.id}` })
      return customer.id
    }),

    createCheckoutSession: ({ customerId, priceId, userId, successUrl, cancelUrl, idempotencyKey }) => provider('checkout.sessions.create', async ({ Stripe, stripe }) => {
      const session = await stripe.checkout.sessions.create({
        mode: 'subscription',
        customer: customerId,
        line_items: [{ price: priceId, quantity: 1 }],
        client_reference_id: userId,
        metadata: { userId },
        subscription_data: { metadata: { userId } },
        success_url: successUrl,
        cancel_url: cancelUrl
      }, { idempotencyKey: idempotencyKey === undefined ? randomUUID() : `checkout-session-${idempotencyKey}` })
      if (!session.url) throw new Stripe.errors.StripeAPIError({ message: 'checkout session without url' })
      return { url: session.url, sessionId: session.id }
    }),

    createPortalSession: (customerId, options = {}) => provider('billingPortal.sessions.create', async ({ stripe }) => {
      const session = await stripe.billingPortal.sessions.create({ customer: customerId, return_url: portalReturnUrl },
        { idempotencyKey: options.idempotencyKey === undefined ? randomUUID() : `portal-session-${options.idempotencyKey}` })
      return session.url
    }),

    retrieveSubscription: (subscriptionId) => provider('subscriptions.retrieve', async ({ Stripe, events, stripe }) => {
      try {
        return events.fromStripeSubscription(await stripe.subscriptions.retrieve(subscriptionId))
      } catch (err) {
        if (isMissing(Stripe, err)) return null
        throw err
      }
    }),

    cancelAtPeriodEnd: (subscriptionId) => provider('subscriptions.update', async ({ events, stripe }) =>
      events.fromStripeSubscription(await stripe.subscriptions.update(subscriptionId, { cancel_at_period_end: true }, { idempotencyKey: randomUUID() }))),

    cancelNow: (subscriptionId, options = {}) => provider('subscriptions.cancel', async ({ Stripe, stripe }) => {
      try {
        // Stripe ignores keys on a DELETE; a cancel repeated is answered as below instead.
        await stripe.subscriptions.cancel(subscriptionId, {}, { idempotencyKey: options.idempotencyKey ?? randomUUID() })
        return 'cancelled'
      } catch (err) {
        // Stripe answers a subscription that has ended "No such subscription" (resource_missing).
        if (isMissing(Stripe, err)) return 'already-ended'
        // Any other refusal is checked against the subscription: done if it has ended after all
        // (a cancel racing the customer's deletion, or an answer worded otherwise).
        if (err instanceof Stripe.errors.StripeInvalidRequestError) {
          const subscription = await stripe.subscriptions.retrieve(subscriptionId).catch((retrieveErr: unknown) => {
            if (isMissing(Stripe, retrieveErr)) return null
            throw retrieveErr
          })
          if (subscription === null || isEnded(subscription.status)) return 'already-ended'
        }
        throw err
      }
    }),

    expireCheckoutSession: (sessionId) => provider('checkout.sessions.expire', async ({ Stripe, stripe }) => {
      try {
        await stripe.checkout.sessions.expire(sessionId, {}, { idempotencyKey: randomUUID() })
      } catch (err) {
        if (isMissing(Stripe, err)) return
        // Stripe expires only open sessions and refuses the others (its error has no code to
        // tell why): done if the session is no longer open.
        if (err instanceof Stripe.errors.StripeInvalidRequestError && (await stripe.checkout.sessions.retrieve(sessionId)).status !== 'open') return
        throw err
      }
    }),

    deleteCustomer: (customerId) => provider('customers.del', async ({ Stripe, stripe }) => {
      try {
        await stripe.customers.del(customerId)
      } catch (err) {
        if (isMissing(Stripe, err)) return
        throw err
      }
    }),

    verifyWebhook: async (rawBody, signatureHeader) => {
      if (webhookSecret === undefined) throw new BillingNotConfiguredError()
      if (typeof signatureHeader !== 'string' || !Buffer.isBuffer(rawBody)) throw new InvalidSignatureError()
      const { Stripe } = await loadStripe()
      try {
        verifyWebhookSignature(Stripe, rawBody, signatureHeader, webhookSecret)
      } catch {
        throw new InvalidSignatureError()
      }
      return rawBody
    },

    readWebhookEvent: async (body) => (await loadStripe()).events.toProviderEvent(body)
  }
}

/** How far a webhook's signed timestamp may be from our clock, either way. */
export const WEBHOOK_TOLERANCE_SECONDS = 300

/** The `t=` of a `stripe-signature` header, read as Stripe's SDK reads it (the last one counts). */
function signedTimestamp (header: string): number {
  let timestamp = Number.NaN
  for (const item of header.split(',')) {
    const [key, value] = item.split('=')
    if (key === 't') timestamp = Number.parseInt(value ?? '', 10)
  }
  return timestamp
}

/**
 * Checks a webhook delivery's signature against the exact raw bytes and its timestamp
 * against our clock; throws when either is wrong. Stripe's SDK refuses only timestamps
 * older than the tolerance, so a delivery dated ahead is refused here: a signed body
 * dated a day ahead would otherwise be replayable for a day and five minutes.
 */
function verifyWebhookSignature (Stripe: StripeSdk, rawBody: Buffer, header: string, secret: string, nowMs = Date.now()): void {
  const signature = Stripe.webhooks.signature
  if (signature === null) throw new Error('the Stripe SDK has no webhook signature helper')
  signature.verifyHeader(rawBody, header, secret, WEBHOOK_TOLERANCE_SECONDS, undefined, nowMs)
  if (signedTimestamp(header) * 1000 - nowMs > WEBHOOK_TOLERANCE_SECONDS * 1000) {
    throw new Stripe.errors.StripeSignatureVerificationError(header, rawBody, { message: 'Timestamp ahead of the tolerance zone' })
  }
}
