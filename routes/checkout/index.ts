// Starts a subscription: a hosted checkout session at the provider.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { Static } from 'typebox'
import { isLive, linkCustomer, replaceOpenCheckoutSession } from '../../db/billing.js'
import { getOrCreatePreferences } from '../../db/preferences.js'
import { CheckoutBody, CheckoutSession } from '../../schemas/billing.js'
import { allowedOrigins, checkoutReturnUrls } from '../../schemas/config.js'
import { errorResponses, ref, Success } from '../../schemas/common.js'
import { SubscriptionAlreadyActiveError, ValidationError } from '../../schemas/errors.js'

const checkout: FastifyPluginAsyncTypebox = async (fastify) => {
  const { db, config } = fastify
  // A body may name its own return pages, on our own origins only: the provider would
  // otherwise redirect payers wherever a caller likes (an open redirect).
  const origins = new Set(allowedOrigins(config))
  const ownOrigin = (url: string | undefined) => url === undefined || origins.has(new URL(url).origin)
  const defaults = checkoutReturnUrls(config)
  const returnUrls = (body: Static<typeof CheckoutBody>) => ({ successUrl: body.successUrl ?? defaults.successUrl, cancelUrl: body.cancelUrl ?? defaults.cancelUrl })

  fastify.post('', {
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
    const payments = fastify.requirePayments()
    const { priceId } = request.body
    const details = [
      ...payments.priceIds.includes(priceId) ? [] : ['Unknown price - priceId'],
      ...(['successUrl', 'cancelUrl'] as const).filter((field) => !ownOrigin(request.body[field])).map((field) => `Must be a URL on APP_URL or CORS_ORIGINS - ${field}`)
    ]
    if (details.length > 0) throw new ValidationError(details)
    const user = request.user
    const preferences = await getOrCreatePreferences(db, user.id)
    if (isLive(preferences.payment_subscription_status)) throw new SubscriptionAlreadyActiveError()
    const customerId = preferences.payment_customer_id ??
      await linkCustomer(db, user.id, await payments.createCustomer({ id: user.id, email: user.email }))
    const session = await payments.createCheckoutSession({ customerId, priceId, userId: user.id, ...returnUrls(request.body) })
    // One checkout that can be paid per user: the one this replaces (opened by an earlier or
    // a concurrent request) is expired. Should that fail, the new session still stands: the
    // webhook cancels a second subscription if the old one is paid after all.
    const previous = await replaceOpenCheckoutSession(db, user.id, session.sessionId)
    if (previous !== null) {
      await payments.expireCheckoutSession(previous).catch((err: unknown) => {
        request.log.warn({ err, checkoutSessionId: previous }, 'could not expire the previous checkout session')
      })
    }
    return { success: true as const, data: session }
  })
}

export default checkout
