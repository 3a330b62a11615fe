// The one place that talks to the payment provider (Stripe): one decorator, fastify.payments.
// Provider failures become 502 `Payment provider error`, logged with the provider's request
// id, never the key; the error carries whether the provider refused the request for good
// (providerFailureOf), for the callers that retry. Without PAYMENT_SECRET_KEY every method
// refuses with 503 `Billing is not configured` (webhook verification also without
// PAYMENT_WEBHOOK_SECRET), and the rest of the service runs. With tracing on
// (plugins/tracing.ts), each call is a client span of the request that made it.
import { randomUUID } from 'node:crypto'
import fp from 'fastify-plugin'
import type { FastifyBaseLogger } from 'fastify'
import Stripe from 'stripe'
import { SpanKind, SpanStatusCode, type Attributes, type Tracer } from '@opentelemetry/api'
import { ATTR_ERROR_TYPE, ATTR_HTTP_RESPONSE_STATUS_CODE, ATTR_SERVER_ADDRESS, ATTR_SERVER_PORT } from '@opentelemetry/semantic-conventions'
import { fromStripeSubscription } from '../../billing/events.js'
import { isEnded, type ProviderSubscription } from '../../billing/rules.js'
import { paymentPriceIds } from '../../config.js'
import { BillingNotConfiguredError, InvalidSignatureError, PaymentProviderError } from '../../errors.js'

export interface Payments {
  /** Throws 503 `Billing is not configured` unless it is. */
  ensureConfigured: () => void
  priceIds: readonly string[]
  createCustomer: (user: { id: string, email: string }) => Promise<string>
  /** `idempotencyKey`: the same on a retry of one request, which then gets the same session (default: a new one per call). */
  createCheckoutSession: (args: { customerId: string, priceId: string, userId: string, successUrl: string, cancelUrl: string, idempotencyKey?: string }) => Promise<{ url: string, sessionId: string }>
  /** `idempotencyKey`: as for createCheckoutSession. */
  createPortalSession: (customerId: string, options?: { idempotencyKey?: string }) => Promise<string>
  /** The subscription as the provider has it now; null when the provider has no such subscription. */
  retrieveSubscription: (subscriptionId: string) => Promise<ProviderSubscription | null>
  cancelAtPeriodEnd: (subscriptionId: string) => Promise<ProviderSubscription>
  /**
   * Ends the subscription now. One that has ended already (cancelled, expired) or that the
   * provider no longer has counts as done: 'already-ended'.
   */
  cancelNow: (subscriptionId: string, options?: { idempotencyKey?: string }) => Promise<'cancelled' | 'already-ended'>
  /** Makes a checkout session impossible to pay; one already completed or expired counts as done. */
  expireCheckoutSession: (sessionId: string) => Promise<void>
  /** Deletes the customer, which also cancels every subscription of theirs at once; one already gone counts as done. */
  deleteCustomer: (customerId: string) => Promise<void>
  /**
   * A webhook delivery's raw body, once its `stripe-signature` holds over the exact bytes
   * and its timestamp is within the tolerance: 400 `Invalid signature` otherwise.
   */
  verifyWebhook: (rawBody: unknown, signatureHeader: unknown) => Buffer
}

declare module 'fastify' {
  interface FastifyInstance {
    payments: Payments
  }
}

const notConfigured = (): never => { throw new BillingNotConfiguredError() }

/** What fastify.payments is without PAYMENT_SECRET_KEY: every use is a 503. */
const UNCONFIGURED: Payments = {
  ensureConfigured: notConfigured,
  priceIds: [],
  createCustomer: notConfigured,
  createCheckoutSession: notConfigured,
  createPortalSession: notConfigured,
  retrieveSubscription: notConfigured,
  cancelAtPeriodEnd: notConfigured,
  cancelNow: notConfigured,
  expireCheckoutSession: notConfigured,
  deleteCustomer: notConfigured,
  verifyWebhook: notConfigured
}

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

const isMissing = (err: unknown): boolean => err instanceof Stripe.errors.StripeInvalidRequestError && err.code === 'resource_missing'

/** What the provider answered to a call that failed, on the PaymentProviderError it threw. */
export interface ProviderFailure {
  /**
   * The provider refused the request itself (Stripe's invalid_request_error, a 400 or 404):
   * sent again, it gets the same answer. Otherwise (unreachable, timed out, 5xx, rate
   * limited, a bad key) a later attempt may succeed.
   */
  refused: boolean
  /** The provider's error type, code, status and request id: no message, no key. */
  detail: string
}

export const providerFailureOf = (err: unknown): ProviderFailure | undefined =>
  (err as { providerFailure?: ProviderFailure } | null)?.providerFailure

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
function traced<T> (tracer: Tracer | undefined, address: Attributes, operation: string, fn: () => Promise<T>): Promise<T> {
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

async function call<T> (log: FastifyBaseLogger, operation: string, fn: () => Promise<T>): Promise<T> {
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

export default fp(async function payments (fastify) {
  const { config, log } = fastify
  if (!config.PAYMENT_SECRET_KEY) {
    fastify.decorate('payments', UNCONFIGURED)
    return
  }
  const stripe = new Stripe(config.PAYMENT_SECRET_KEY,
    stripeClientOptions(config.PAYMENT_API_URL, config.PAYMENT_TIMEOUT_MS, config.PAYMENT_MAX_RETRIES))
  const appUrl = config.APP_URL.replace(/\/+$/, '')
  const webhookSecret = config.PAYMENT_WEBHOOK_SECRET
  const { tracer } = fastify
  const address = providerAddress(config.PAYMENT_API_URL)
  const provider = <T>(operation: string, fn: () => Promise<T>): Promise<T> =>
    traced(tracer, address, operation, () => call(log, operation, fn))

  const client: Payments = {
    ensureConfigured: () => {},
    priceIds: paymentPriceIds(config),

    createCustomer: (user) => provider('customers.create', async () => {
      // A stable key: two quick clicks create one customer at the provider.
      const customer = await stripe.customers.create(
        { email: user.email, metadata: { userId: user.id } },
        { idempotencyKey: `customer-create-${user.id}` })
      return customer.id
    }),

    createCheckoutSession: ({ customerId, priceId, userId, successUrl, cancelUrl, idempotencyKey }) => provider('checkout.sessions.create', async () => {
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

    createPortalSession: (customerId, options = {}) => provider('billingPortal.sessions.create', async () => {
      const session = await stripe.billingPortal.sessions.create({ customer: customerId, return_url: appUrl },
        { idempotencyKey: options.idempotencyKey === undefined ? randomUUID() : `portal-session-${options.idempotencyKey}` })
      return session.url
    }),

    retrieveSubscription: (subscriptionId) => provider('subscriptions.retrieve', async () => {
      try {
        return fromStripeSubscription(await stripe.subscriptions.retrieve(subscriptionId))
      } catch (err) {
        if (isMissing(err)) return null
        throw err
      }
    }),

    cancelAtPeriodEnd: (subscriptionId) => provider('subscriptions.update', async () =>
      fromStripeSubscription(await stripe.subscriptions.update(subscriptionId, { cancel_at_period_end: true }, { idempotencyKey: randomUUID() }))),

    cancelNow: (subscriptionId, options = {}) => provider('subscriptions.cancel', async () => {
      try {
        // Stripe ignores keys on a DELETE; a cancel repeated is answered as below instead.
        await stripe.subscriptions.cancel(subscriptionId, {}, { idempotencyKey: options.idempotencyKey ?? randomUUID() })
        return 'cancelled'
      } catch (err) {
        // Stripe answers a subscription that has ended "No such subscription" (resource_missing).
        if (isMissing(err)) return 'already-ended'
        // Any other refusal is checked against the subscription: done if it has ended after all
        // (a cancel racing the customer's deletion, or an answer worded otherwise).
        if (err instanceof Stripe.errors.StripeInvalidRequestError) {
          const subscription = await stripe.subscriptions.retrieve(subscriptionId).catch((retrieveErr: unknown) => {
            if (isMissing(retrieveErr)) return null
            throw retrieveErr
          })
          if (subscription === null || isEnded(subscription.status)) return 'already-ended'
        }
        throw err
      }
    }),

    expireCheckoutSession: (sessionId) => provider('checkout.sessions.expire', async () => {
      try {
        await stripe.checkout.sessions.expire(sessionId, {}, { idempotencyKey: randomUUID() })
      } catch (err) {
        if (isMissing(err)) return
        // Stripe expires only open sessions and refuses the others (its error has no code to
        // tell why): done if the session is no longer open.
        if (err instanceof Stripe.errors.StripeInvalidRequestError && (await stripe.checkout.sessions.retrieve(sessionId)).status !== 'open') return
        throw err
      }
    }),

    deleteCustomer: (customerId) => provider('customers.del', async () => {
      try {
        await stripe.customers.del(customerId)
      } catch (err) {
        if (isMissing(err)) return
        throw err
      }
    }),

    verifyWebhook: (rawBody, signatureHeader) => {
      if (webhookSecret === undefined) throw new BillingNotConfiguredError()
      if (typeof signatureHeader !== 'string' || !Buffer.isBuffer(rawBody)) throw new InvalidSignatureError()
      try {
        verifyWebhookSignature(rawBody, signatureHeader, webhookSecret)
      } catch {
        throw new InvalidSignatureError()
      }
      return rawBody
    }
  }
  fastify.decorate('payments', client)
}, { name: 'payments', dependencies: ['tracing'] })

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
export function verifyWebhookSignature (rawBody: Buffer, header: string, secret: string, nowMs = Date.now()): void {
  const signature = Stripe.webhooks.signature
  if (signature === null) throw new Error('the Stripe SDK has no webhook signature helper')
  signature.verifyHeader(rawBody, header, secret, WEBHOOK_TOLERANCE_SECONDS, undefined, nowMs)
  if (signedTimestamp(header) * 1000 - nowMs > WEBHOOK_TOLERANCE_SECONDS * 1000) {
    throw new Stripe.errors.StripeSignatureVerificationError(header, rawBody, { message: 'Timestamp ahead of the tolerance zone' })
  }
}
