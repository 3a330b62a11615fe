// The caller's subscription, from the stored record; cancellation at period end.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { SubscriptionResponse } from '../../schemas/billing.js'
import { errorResponses, ref } from '../../schemas/common.js'

const subscription: FastifyPluginAsyncTypebox = async (fastify) => {
  const { billing } = fastify

  fastify.get('', {
    schema: {
      tags: ['billing'],
      operationId: 'getSubscription',
      summary: 'The caller\'s subscription',
      description: 'From the stored record (kept current by the provider\'s webhooks); nulls on the free plan.',
      response: { 200: ref(SubscriptionResponse) }
    }
  }, async (request) => ({ success: true as const, data: await billing.storedSubscription(request.user.id) }))

  fastify.delete('', {
    schema: {
      tags: ['billing'],
      operationId: 'cancelSubscription',
      summary: 'Cancel at the end of the current period',
      description: 'The user keeps what they paid for until `currentPeriodEnd`; then the provider ends the subscription and the plan becomes free.',
      response: { 200: ref(SubscriptionResponse), ...errorResponses(404, 502) }
    }
  }, async (request) => ({ success: true as const, data: await billing.cancelAtPeriodEnd(request.user.id) }))
}

export default subscription
