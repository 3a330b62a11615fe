// The one place that talks to the payment provider (Stripe). Provider failures become
// 502 `Payment provider error`, logged with the provider's request id, never the key.
// Without PAYMENT_SECRET_KEY, fastify.payments is null and billing routes answer 503.
import { randomUUID } from 'node:crypto'
import fp from 'fastify-plugin'
import type { FastifyBaseLogger } from 'fastify'
import Stripe from 'stripe'
import { paymentPriceIds } from '../../schemas/config.js'
import { BillingNotConfiguredError, PaymentProviderError } from '../../schemas/errors.js'

/** What the service stores about a subscription, whatever the provider calls it. */
export interface SubscriptionState {
  subscriptionId: string
  customerId: string
  status: string
  priceId: string | null
  currentPeriodEnd: Date | null
  cancelAtPeriodEnd: boolean
}

export interface Payments {
  priceIds: readonly string[]
  createCustomer: (user: { id: string, email: string }) => Promise<string>
  createCheckoutSession: (args: { customerId: string, priceId: string, userId: string, successUrl: string, cancelUrl: string }) => Promise<{ url: string, sessionId: string }>
  createPortalSession: (customerId: string) => Promise<string>
  retrieveSubscription: (subscriptionId: string) => Promise<SubscriptionState>
  cancelAtPeriodEnd: (subscriptionId: string) => Promise<SubscriptionState>
  /** Ends the subscription now; one that is already gone at the provider counts as done. */
  cancelNow: (subscriptionId: string) => Promise<void>
  /** Makes a checkout session impossible to pay; one already completed or expired counts as done. */
  expireCheckoutSession: (sessionId: string) => Promise<void>
  /** Deletes the customer, which also cancels every subscription of theirs at once; one already gone counts as done. */
  deleteCustomer: (customerId: string) => Promise<void>
}

declare module 'fastify' {
  interface FastifyInstance {
    payments: Payments | null
    /** The payments client, or a 503 `Billing is not configured`. */
    requirePayments: () => Payments
  }
}

export const unixToDate = (seconds: number | null | undefined): Date | null =>
  typeof seconds === 'number' ? new Date(seconds * 1000) : null

/** A provider reference, expanded or not, as its id. */
export const idOf = (value: string | { id: string } | null | undefined): string | null =>
  value == null ? null : typeof value === 'string' ? value : value.id

export function toSubscriptionState (subscription: Stripe.Subscription): SubscriptionState {
  // In this API version the period lives on the subscription items.
  const item = subscription.items?.data?.[0]
  return {
    subscriptionId: subscription.id,
    customerId: idOf(subscription.customer) ?? '',
    status: subscription.status,
    priceId: item?.price?.id ?? null,
    currentPeriodEnd: unixToDate(item?.current_period_end),
    cancelAtPeriodEnd: subscription.cancel_at_period_end ?? false
  }
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

async function call<T> (log: FastifyBaseLogger, operation: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn()
  } catch (err) {
    if (err instanceof Stripe.errors.StripeError) {
      log.error({ operation, providerRequestId: err.requestId, type: err.type, code: err.code, statusCode: err.statusCode }, 'payment provider error')
      throw new PaymentProviderError()
    }
    throw err
  }
}

export default fp(async function payments (fastify) {
  const { config, log } = fastify
  if (!config.PAYMENT_SECRET_KEY) {
    fastify.decorate('payments', null)
    fastify.decorate('requirePayments', () => { throw new BillingNotConfiguredError() })
    return
  }
  const stripe = new Stripe(config.PAYMENT_SECRET_KEY,
    stripeClientOptions(config.PAYMENT_API_URL, config.PAYMENT_TIMEOUT_MS, config.PAYMENT_MAX_RETRIES))
  const appUrl = config.APP_URL.replace(/\/+$/, '')

  const client: Payments = {
    priceIds: paymentPriceIds(config),

    createCustomer: (user) => call(log, 'customers.create', async () => {
      // A stable key: two quick clicks create one customer at the provider.
      const customer = await stripe.customers.create(
        { email: user.email, metadata: { userId: user.id } },
        { idempotencyKey: `customer-create-${user.id}` })
      return customer.id
    }),

    createCheckoutSession: ({ customerId, priceId, userId, successUrl, cancelUrl }) => call(log, 'checkout.sessions.create', async () => {
      const session = await stripe.checkout.sessions.create({
        mode: 'subscription',
        customer: customerId,
        line_items: [{ price: priceId, quantity: 1 }],
        client_reference_id: userId,
        metadata: { userId },
        subscription_data: { metadata: { userId } },
        success_url: successUrl,
        cancel_url: cancelUrl
      }, { idempotencyKey: randomUUID() })
      if (!session.url) throw new Stripe.errors.StripeAPIError({ message: 'checkout session without url' })
      return { url: session.url, sessionId: session.id }
    }),

    createPortalSession: (customerId) => call(log, 'billingPortal.sessions.create', async () => {
      const session = await stripe.billingPortal.sessions.create({ customer: customerId, return_url: appUrl }, { idempotencyKey: randomUUID() })
      return session.url
    }),

    retrieveSubscription: (subscriptionId) => call(log, 'subscriptions.retrieve', async () =>
      toSubscriptionState(await stripe.subscriptions.retrieve(subscriptionId))),

    cancelAtPeriodEnd: (subscriptionId) => call(log, 'subscriptions.update', async () =>
      toSubscriptionState(await stripe.subscriptions.update(subscriptionId, { cancel_at_period_end: true }, { idempotencyKey: randomUUID() }))),

    cancelNow: (subscriptionId) => call(log, 'subscriptions.cancel', async () => {
      try {
        await stripe.subscriptions.cancel(subscriptionId, {}, { idempotencyKey: randomUUID() })
      } catch (err) {
        if (isMissing(err)) return
        throw err
      }
    }),

    expireCheckoutSession: (sessionId) => call(log, 'checkout.sessions.expire', async () => {
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

    deleteCustomer: (customerId) => call(log, 'customers.del', async () => {
      try {
        await stripe.customers.del(customerId)
      } catch (err) {
        if (isMissing(err)) return
        throw err
      }
    })
  }
  fastify.decorate('payments', client)
  fastify.decorate('requirePayments', () => client)
}, { name: 'payments' })

/**
 * Stops everything the provider could bill a deleted account for: its open checkout can
 * no longer be paid, and its customer is deleted, which cancels every subscription of it
 * (also one a webhook has not told us of yet). Without a customer, a live subscription is
 * cancelled on its own. Throws (502) on a provider failure, before anything of ours is deleted.
 */
export async function closeBillingAccount (payments: Payments, account: {
  customerId: string | null
  liveSubscriptionId: string | null
  openCheckoutSessionId: string | null
}): Promise<void> {
  if (account.openCheckoutSessionId !== null) await payments.expireCheckoutSession(account.openCheckoutSessionId)
  if (account.customerId !== null) await payments.deleteCustomer(account.customerId)
  else if (account.liveSubscriptionId !== null) await payments.cancelNow(account.liveSubscriptionId)
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
export function verifyWebhookSignature (rawBody: Buffer, header: string, secret: string, nowMs = Date.now()): void {
  const signature = Stripe.webhooks.signature
  if (signature === null) throw new Error('the Stripe SDK has no webhook signature helper')
  signature.verifyHeader(rawBody, header, secret, WEBHOOK_TOLERANCE_SECONDS, undefined, nowMs)
  if (signedTimestamp(header) * 1000 - nowMs > WEBHOOK_TOLERANCE_SECONDS * 1000) {
    throw new Stripe.errors.StripeSignatureVerificationError(header, rawBody, { message: 'Timestamp ahead of the tolerance zone' })
  }
}
