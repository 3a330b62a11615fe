// The payment provider as billing/service.ts sees it: an interface of ours, in our terms (no
// Fastify, no SDK types). billing/stripe-provider.ts implements it for Stripe; without
// PAYMENT_SECRET_KEY the plugin (plugins/app/payments.ts) decorates UNCONFIGURED_PROVIDER.
import type { SubscriptionTarget } from '../db/types.js'
import { BillingNotConfiguredError } from '../errors.js'
import type { BillingEvent, ProviderSubscription } from './rules.js'

/** What billing writes its lines to: pino's loggers, Fastify's among them, fit. */
export interface BillingLog {
  info: (obj: object | string, msg?: string) => void
  warn: (obj: object | string, msg?: string) => void
  error: (obj: object | string, msg?: string) => void
}

/** What a handled provider event means for us. */
export type EventMeaning =
  | { kind: 'apply', target: SubscriptionTarget, event: BillingEvent }
  /** A completed checkout: the session carries no status, price or period, so the subscription is to be fetched. */
  | { kind: 'checkout', at: Date, userId: string, subscriptionId: string, customerId: string | null, checkoutSessionId: string | null }
  | { kind: 'nothing', why: string }

/** A signed provider event, read. */
export interface ProviderEvent {
  id: string
  /** The provider's name for its type (what the metrics count by). */
  type: string
  /** The provider's `created` time. */
  created: Date
  /** Null for a type we do not handle. */
  meaning: EventMeaning | null
}

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

/**
 * Every call that reaches the provider and fails there throws 502 `Payment provider error`
 * carrying a ProviderFailure; an unconfigured provider throws 503 `Billing is not configured`.
 */
export interface PaymentProvider {
  /** Throws 503 `Billing is not configured` unless it is. */
  ensureConfigured: () => void
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
   * A webhook delivery's raw body, once its signature header holds over the exact bytes and
   * its timestamp is within the tolerance: 400 `Invalid signature` otherwise.
   */
  verifyWebhook: (rawBody: unknown, signatureHeader: unknown) => Promise<Buffer>
  /**
   * A verified body, parsed, as an event of ours: 400 when it is not shaped like what we read
   * from it (nothing a retry would fix).
   */
  readWebhookEvent: (body: unknown) => Promise<ProviderEvent>
}

const notConfigured = (): never => { throw new BillingNotConfiguredError() }

/** The provider without PAYMENT_SECRET_KEY: every use is a 503. */
export const UNCONFIGURED_PROVIDER: PaymentProvider = {
  ensureConfigured: notConfigured,
  createCustomer: notConfigured,
  createCheckoutSession: notConfigured,
  createPortalSession: notConfigured,
  retrieveSubscription: notConfigured,
  cancelAtPeriodEnd: notConfigured,
  cancelNow: notConfigured,
  expireCheckoutSession: notConfigured,
  deleteCustomer: notConfigured,
  verifyWebhook: notConfigured,
  readWebhookEvent: notConfigured
}
