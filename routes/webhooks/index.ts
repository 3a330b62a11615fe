// POST /webhooks/payment: the provider's signed events. The route has the signature checked
// over the raw bytes, then the shape, and hands the event to fastify.billing
// (billing/service.ts), which applies it exactly once, in whatever order events arrive.
import type { FastifyRequest } from 'fastify'
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { EventOutcome } from '../../billing/service.js'
import { HANDLED_EVENT_TYPES } from '../../billing/stripe-event-types.js'
import { WebhookEvent, WebhookReceived } from '../../schemas/billing.js'
import { errorResponses } from '../../schemas/common.js'

/** `a, b and c` */
const listed = (items: readonly string[]): string => items.length < 2 ? items.join('') : `${items.slice(0, -1).join(', ')} and ${items.at(-1)}`

const webhooks: FastifyPluginAsyncTypebox = async (fastify) => {
  const { billing } = fastify
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

  fastify.post('/payment', {
    config: { public: true },
    // The body schema documents the event in the OpenAPI document; what arrives here is
    // bytes, read once its signature holds (billing.verifyWebhook, billing.readWebhookEvent), so
    // schema validation is a no-op.
    validatorCompiler: () => () => true,
    schema: {
      tags: ['billing'],
      operationId: 'receivePaymentWebhook',
      summary: 'Payment provider webhook',
      description: 'Stripe events, verified against the raw body with the `stripe-signature` header (300 s tolerance). ' +
        `Handles ${listed(HANDLED_EVENT_TYPES)}; other types are acknowledged and ignored. ` +
        'A redelivered event is acknowledged and not applied again. A failure while applying answers 5xx so the provider retries; ' +
        'a provider call the event needs (cancelling a second subscription) is queued with the event and made after the answer, retried until done.',
      body: WebhookEvent,
      response: { 200: WebhookReceived, ...errorResponses(502) }
    }
  }, async (request) => {
    const signed = await billing.verifyWebhook(request.body, request.headers['stripe-signature'])
    const event = await billing.readWebhookEvent(await parseJson(request, signed))
    let outcome: EventOutcome | 'failed' = 'failed'
    try {
      outcome = await billing.applyProviderEvent(event, request.log.child({ eventId: event.id, eventType: event.type }))
    } finally {
      fastify.metrics.webhookEvents.inc({ type: event.type, outcome })
    }
    return { received: true as const }
  })
}

export default webhooks
