// Starts a subscription: a hosted checkout session at the provider.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { isLive, linkCustomer } from '../../db/billing.js'
import { getOrCreatePreferences } from '../../db/preferences.js'
import { CheckoutBody, RedirectUrl } from '../../schemas/billing.js'
import { errorResponses, Success } from '../../schemas/common.js'
import { SubscriptionAlreadyActiveError, ValidationError } from '../../schemas/errors.js'

const checkout: FastifyPluginAsyncTypebox = async (fastify) => {
  const { db } = fastify

  fastify.post('', {
    schema: {
      tags: ['billing'],
      operationId: 'createCheckoutSession',
      summary: 'Start a subscription checkout',
      description: 'Reuses the user\'s provider customer or creates one (stored before the session is created), ' +
        'then returns the hosted checkout page URL. 409 when a subscription is already live.',
      body: CheckoutBody,
      response: { 200: Success(RedirectUrl), ...errorResponses(400, 401, 409, 413, 415, 502, 503) }
    }
  }, async (request) => {
    const payments = fastify.requirePayments()
    const { priceId } = request.body
    if (!payments.priceIds.includes(priceId)) throw new ValidationError(['Unknown price - priceId'])
    const user = request.user
    const preferences = await getOrCreatePreferences(db, user.id)
    if (isLive(preferences.payment_subscription_status)) throw new SubscriptionAlreadyActiveError()
    const customerId = preferences.payment_customer_id ??
      await linkCustomer(db, user.id, await payments.createCustomer({ id: user.id, email: user.email }))
    const url = await payments.createCheckoutSession({ customerId, priceId, userId: user.id })
    return { success: true as const, data: { url } }
  })
}

export default checkout
