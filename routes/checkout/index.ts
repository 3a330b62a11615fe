// Starts a subscription: a hosted checkout session at the provider.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { Static } from 'typebox'
import { CheckoutBody, CheckoutSession } from '../../schemas/billing.js'
import { allowedOrigins, checkoutReturnUrls } from '../../config.js'
import { errorResponses, ref, Success } from '../../schemas/common.js'
import { ValidationError } from '../../errors.js'

const checkout: FastifyPluginAsyncTypebox = async (fastify) => {
  const { billing, config } = fastify
  // A body may name its own return pages, on our own origins only: the provider would
  // otherwise redirect payers wherever a caller likes (an open redirect).
  const origins = new Set(allowedOrigins(config))
  // The schema's `uri` format accepts some texts that WHATWG URLs refuse
  // (http://localhost:3000:80/): those are on no origin of ours either.
  const ownOrigin = (url: string | undefined) => url === undefined || (URL.canParse(url) && origins.has(new URL(url).origin))
  const defaults = checkoutReturnUrls(config)
  const returnUrls = (body: Static<typeof CheckoutBody>) => ({ successUrl: body.successUrl ?? defaults.successUrl, cancelUrl: body.cancelUrl ?? defaults.cancelUrl })

  fastify.post('', {
    // With an Idempotency-Key, a retry gets the same checkout session, never a second one.
    config: { idempotent: 'lease' },
    schema: {
      tags: ['billing'],
      operationId: 'createCheckoutSession',
      summary: 'Start a subscription checkout',
      description: 'Reuses the user\'s provider customer or creates one (stored before the session is created), ' +
        'then returns the hosted checkout page URL and the session id. The provider returns the payer to ' +
        '`successUrl`/`cancelUrl` (by default APP_URL/dashboard/billing?success=true and ?canceled=true; a body ' +
        'may name others on APP_URL or a CORS_ORIGINS origin). 409 when a subscription is already live.',
      body: ref(CheckoutBody),
      response: { 200: Success(CheckoutSession), ...errorResponses(409, 502) }
    }
  }, async (request) => {
    billing.ensureConfigured()
    const { priceId } = request.body
    const details = [
      ...billing.priceIds.includes(priceId) ? [] : ['Unknown price - priceId'],
      ...(['successUrl', 'cancelUrl'] as const).filter((field) => !ownOrigin(request.body[field])).map((field) => `Must be a URL on APP_URL or CORS_ORIGINS - ${field}`)
    ]
    if (details.length > 0) throw new ValidationError(details)
    const session = await billing.startCheckout(request.user,
      { priceId, ...returnUrls(request.body), idempotencyKey: request.idempotentRequestId ?? undefined }, request.log)
    return { success: true as const, data: session }
  })
}

export default checkout
