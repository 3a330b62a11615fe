// POST /webhooks/payment: signed provider events, each applied exactly once (its id is
// recorded in the same transaction as its effect) as db/billing-rules.ts decides.
import type { FastifyBaseLogger, FastifyRequest } from 'fastify'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { Kysely } from 'kysely'
import type Stripe from 'stripe'
import { applyBillingEvent, forgetCheckoutSession, recordPaymentEvent, type SubscriptionTarget } from '../../db/billing.js'
import type { BillingEvent, SubscriptionSnapshot } from '../../db/billing-rules.js'
import type { Database } from '../../db/types.js'
import { recordUsageEvent } from '../../db/usage-events.js'
import { idOf, toSubscriptionState, unixToDate, verifyWebhookSignature, type Payments, type SubscriptionState } from '../../plugins/app/payments.js'
import { Value } from 'typebox/value'
import type { TSchema } from 'typebox'
import {
  CheckoutSessionObject, InvoiceObject, ProviderEventEnvelope, SubscriptionObject, WebhookEvent, WebhookReceived
} from '../../schemas/billing.js'
import { errorResponses } from '../../schemas/common.js'
import { BillingNotConfiguredError, InvalidSignatureError, ValidationError } from '../../schemas/errors.js'

interface PlannedEvent { target: SubscriptionTarget, event: BillingEvent, checkoutSessionId?: string }

const snapshotOf = (state: SubscriptionState): SubscriptionSnapshot => ({
  id: state.subscriptionId,
  status: state.status,
  priceId: state.priceId,
  currentPeriodEnd: state.currentPeriodEnd,
  cancelAtPeriodEnd: state.cancelAtPeriodEnd
})

/** The event in our terms, with the user it is for; null for events with nothing to apply. */
async function planEvent (event: Stripe.Event, payments: Payments, log: FastifyBaseLogger): Promise<PlannedEvent | null> {
  const at = new Date(event.created * 1000)
  switch (event.type) {
    case 'checkout.session.completed': {
      const session = event.data.object
      const userId = session.client_reference_id ?? session.metadata?.userId
      const subscriptionId = idOf(session.subscription)
      if (session.mode !== 'subscription' || !userId || !subscriptionId) {
        log.warn({ eventId: event.id }, 'checkout session without user or subscription: ignored')
        return null
      }
      // The session does not carry status, price or period: ask the provider.
      const state = await payments.retrieveSubscription(subscriptionId)
      const customerId = idOf(session.customer) ?? state.customerId
      return {
        target: { userId },
        event: { kind: 'checkout-completed', at, subscription: snapshotOf(state), customerId },
        ...(session.id !== undefined && { checkoutSessionId: session.id })
      }
    }
    case 'customer.subscription.updated':
    case 'customer.subscription.deleted': {
      const state = toSubscriptionState(event.data.object)
      const deleted = event.type === 'customer.subscription.deleted'
      const subscription = deleted ? { ...snapshotOf(state), status: 'canceled', cancelAtPeriodEnd: false } : snapshotOf(state)
      return {
        target: { customerId: state.customerId },
        event: { kind: deleted ? 'subscription-deleted' : 'subscription-updated', at, subscription }
      }
    }
    case 'invoice.payment_succeeded':
    case 'invoice.payment_failed': {
      const invoice = event.data.object
      const subscriptionId = idOf(invoice.parent?.subscription_details?.subscription)
      const customerId = idOf(invoice.customer)
      if (!subscriptionId || !customerId) return null
      return {
        target: { customerId },
        event: event.type === 'invoice.payment_succeeded'
          ? { kind: 'invoice-paid', at, subscriptionId, periodEnd: unixToDate(invoice.lines?.data?.[0]?.period?.end) }
          : { kind: 'invoice-failed', at, subscriptionId }
      }
    }
    default:
      return null
  }
}

/**
 * Applies a planned event in the transaction that records it. The provider calls it may
 * need (a subscription nobody may be billed for is cancelled) are made here too: should one
 * fail, nothing is recorded and the provider's retry of the event tries again.
 */
async function applyPlanned (tx: Kysely<Database>, planned: PlannedEvent, payments: Payments, log: FastifyBaseLogger): Promise<void> {
  const { target, event } = planned
  const result = await applyBillingEvent(tx, target, event)
  if (planned.checkoutSessionId !== undefined && 'userId' in target) await forgetCheckoutSession(tx, target.userId, planned.checkoutSessionId)
  switch (result.outcome) {
    case 'unknown':
      if (event.kind === 'checkout-completed') {
        log.warn({ target, subscriptionId: event.subscription.id }, 'checkout completed for an account that no longer exists: cancelling its subscription')
        await payments.cancelNow(event.subscription.id)
      } else {
        log.warn({ target }, 'webhook event for an unknown customer: recorded, nothing changed')
      }
      return
    case 'second-subscription':
      log.warn({ userId: result.userId, subscriptionId: result.subscriptionId }, 'checkout completed a second subscription while one is live: cancelling it')
      await payments.cancelNow(result.subscriptionId)
      return
    case 'ignored':
      log.info({ because: result.because }, 'webhook event changes nothing: recorded')
      return
    case 'applied':
      if (event.kind === 'checkout-completed' && result.plan === 'pro') {
        await recordUsageEvent(tx, { name: 'subscription_upgraded', userId: result.userId, properties: { userId: result.userId, plan: result.plan } })
      }
  }
}

// The handled event types and the shape of what each carries in data.object.
const OBJECT_SCHEMAS: Record<string, TSchema> = {
  'checkout.session.completed': CheckoutSessionObject,
  'customer.subscription.updated': SubscriptionObject,
  'customer.subscription.deleted': SubscriptionObject,
  'invoice.payment_succeeded': InvoiceObject,
  'invoice.payment_failed': InvoiceObject
}
const HANDLED = new Set(Object.keys(OBJECT_SCHEMAS))

const webhooks: FastifyPluginAsyncTypebox = async (fastify) => {
  const { db, config } = fastify
  // The body stays bytes until its signature holds: the signature is over the exact raw
  // bytes (a utf8 string would corrupt non-UTF-8 ones), and parsing what anyone can send
  // (1 MiB of nesting stalls the event loop for 100 ms and more) is for signed bodies only.
  // Registered in this plugin's context, it replaces the JSON parser for this route only.
  fastify.removeContentTypeParser('application/json')
  fastify.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_request, body, done) => { done(null, body) })
  // Fastify's own JSON parser (prototype poisoning refused), errors answered as INVALID_JSON.
  const jsonParser = fastify.getDefaultJsonParser('error', 'error')
  const parseJson = (request: FastifyRequest, body: Buffer) => new Promise<unknown>((resolve, reject) => {
    jsonParser(request, body as unknown as string, (err, value) => { if (err) reject(err); else resolve(value) })
  })

  /** The delivered event: signature and timestamp checked over the raw bytes first, then parsed and checked for shape. */
  async function verifiedEvent (request: FastifyRequest, secret: string): Promise<Stripe.Event> {
    const raw: unknown = request.body
    const signature = request.headers['stripe-signature']
    if (typeof signature !== 'string' || !Buffer.isBuffer(raw)) throw new InvalidSignatureError()
    try {
      verifyWebhookSignature(raw, signature, secret)
    } catch {
      throw new InvalidSignatureError()
    }
    const event = await parseJson(request, raw)
    // Signed but not shaped like what we read from it: nothing a retry would fix.
    // (The envelope first: using `type` as a key before knowing it is a string would stringify
    // whatever it is, however deep.)
    if (!Value.Check(ProviderEventEnvelope, event)) throw new ValidationError(['Not a well-formed provider event - body'])
    const objectSchema = OBJECT_SCHEMAS[event.type]
    if (objectSchema !== undefined && !Value.Check(objectSchema, event.data.object)) {
      throw new ValidationError(['Not a well-formed provider event - body'])
    }
    return event as unknown as Stripe.Event
  }

  fastify.post('/payment', {
    config: { public: true },
    // The body schema documents the event in the OpenAPI document; what arrives here is
    // bytes, checked by verifiedEvent() once signed, so schema validation is a no-op.
    validatorCompiler: () => () => true,
    schema: {
      tags: ['billing'],
      operationId: 'receivePaymentWebhook',
      summary: 'Payment provider webhook',
      description: 'Stripe events, verified against the raw body with the `stripe-signature` header (300 s tolerance). ' +
        'Handles checkout.session.completed, customer.subscription.updated, customer.subscription.deleted, ' +
        'invoice.payment_succeeded and invoice.payment_failed; other types are acknowledged and ignored. ' +
        'A redelivered event is acknowledged and not applied again. A failure while applying answers 5xx so the provider retries.',
      body: WebhookEvent,
      response: { 200: WebhookReceived, ...errorResponses(502) }
    }
  }, async (request) => {
    const payments = fastify.payments
    const secret = config.PAYMENT_WEBHOOK_SECRET
    if (payments === null || secret === undefined) throw new BillingNotConfiguredError()
    const event = await verifiedEvent(request, secret)
    const log = request.log.child({ eventId: event.id, eventType: event.type })
    if (!HANDLED.has(event.type)) {
      log.info('webhook event type not handled: ignored')
      return { received: true as const }
    }
    // Cheap early exit for redeliveries; the insert below is what settles a race.
    const seen = await db.selectFrom('payment_events').select('id').where('id', '=', event.id).executeTakeFirst()
    if (seen) {
      log.info('webhook event already applied')
      return { received: true as const }
    }
    const planned = await planEvent(event, payments, log)
    await db.transaction().execute(async (tx) => {
      if (!await recordPaymentEvent(tx, { id: event.id, type: event.type, created: new Date(event.created * 1000) })) return
      if (planned !== null) await applyPlanned(tx, planned, payments, log)
    })
    return { received: true as const }
  })
}

export default webhooks
