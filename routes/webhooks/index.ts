// POST /webhooks/payment: signed provider events, each applied exactly once (its id is
// recorded in the same transaction as its effect), never rolling the state back.
import type { FastifyBaseLogger, FastifyRequest } from 'fastify'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type Stripe from 'stripe'
import { applySubscriptionChange, recordPaymentEvent, type SubscriptionChange, type SubscriptionTarget } from '../../db/billing.js'
import { recordUsageEvent } from '../../db/usage-events.js'
import { idOf, unixToDate, verifyWebhookSignature, type Payments } from '../../plugins/app/payments.js'
import { Value } from 'typebox/value'
import type { TSchema } from 'typebox'
import {
  CheckoutSessionObject, InvoiceObject, ProviderEventEnvelope, SubscriptionObject, WebhookEvent, WebhookReceived
} from '../../schemas/billing.js'
import { errorResponses } from '../../schemas/common.js'
import { BillingNotConfiguredError, InvalidSignatureError, ValidationError } from '../../schemas/errors.js'

interface PlannedChange { target: SubscriptionTarget, change: SubscriptionChange, upgrade: boolean }

/** What an event means for the stored subscription; null for events with nothing to apply. */
async function planChange (event: Stripe.Event, payments: Payments, log: FastifyBaseLogger): Promise<PlannedChange | null> {
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
      return { target: { userId }, change: { ...state, customerId: idOf(session.customer) ?? state.customerId }, upgrade: true }
    }
    case 'customer.subscription.updated':
    case 'customer.subscription.deleted': {
      const subscription = event.data.object
      const item = subscription.items?.data?.[0]
      const deleted = event.type === 'customer.subscription.deleted'
      return {
        target: { customerId: idOf(subscription.customer) ?? '' },
        change: {
          subscriptionId: subscription.id,
          status: deleted ? 'canceled' : subscription.status,
          priceId: item?.price?.id ?? null,
          currentPeriodEnd: unixToDate(item?.current_period_end),
          cancelAtPeriodEnd: deleted ? false : subscription.cancel_at_period_end
        },
        upgrade: false
      }
    }
    case 'invoice.payment_succeeded':
    case 'invoice.payment_failed': {
      const invoice = event.data.object
      const subscriptionId = idOf(invoice.parent?.subscription_details?.subscription)
      const customerId = idOf(invoice.customer)
      if (!subscriptionId || !customerId) return null
      const succeeded = event.type === 'invoice.payment_succeeded'
      return {
        target: { customerId },
        change: {
          subscriptionId,
          status: succeeded ? 'active' : 'past_due',
          ...(succeeded && { currentPeriodEnd: unixToDate(invoice.lines?.data?.[0]?.period?.end) ?? undefined })
        },
        upgrade: false
      }
    }
    default:
      return null
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
      response: { 200: WebhookReceived, ...errorResponses(400, 413, 415, 502, 503) }
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
    const planned = await planChange(event, payments, log)
    const created = new Date(event.created * 1000)
    await db.transaction().execute(async (tx) => {
      if (!await recordPaymentEvent(tx, { id: event.id, type: event.type, created })) return
      if (planned === null) return
      const result = await applySubscriptionChange(tx, planned.target, planned.change, created)
      if (result.outcome === 'unknown') log.warn({ target: planned.target }, 'webhook event for an unknown customer: recorded, nothing changed')
      else if (result.outcome === 'stale') log.info('webhook event older than the stored state: recorded, nothing changed')
      else if (planned.upgrade && result.plan === 'pro') {
        await recordUsageEvent(tx, { name: 'subscription_upgraded', userId: result.userId, properties: { userId: result.userId, plan: result.plan } })
      }
    })
    return { received: true as const }
  })
}

export default webhooks
