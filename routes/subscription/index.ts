// The caller's subscription, from the stored record; cancellation at period end.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { isLive, storeCancelAtPeriodEnd, toStoredSubscription } from '../../db/billing.js'
import { getOrCreatePreferences } from '../../db/preferences.js'
import { SubscriptionResponse } from '../../schemas/billing.js'
import { errorResponses, ref } from '../../schemas/common.js'
import { NoActiveSubscriptionError } from '../../schemas/errors.js'

const subscription: FastifyPluginAsyncTypebox = async (fastify) => {
  const { db } = fastify

  fastify.get('', {
    schema: {
      tags: ['billing'],
      operationId: 'getSubscription',
      summary: 'The caller\'s subscription',
      description: 'From the stored record (kept current by the provider\'s webhooks); nulls on the free plan.',
      response: { 200: ref(SubscriptionResponse) }
    }
  }, async (request) => {
    fastify.requirePayments()
    return { success: true as const, data: toStoredSubscription(await getOrCreatePreferences(db, request.user.id)) }
  })

  fastify.delete('', {
    schema: {
      tags: ['billing'],
      operationId: 'cancelSubscription',
      summary: 'Cancel at the end of the current period',
      description: 'The user keeps what they paid for until `currentPeriodEnd`; then the provider ends the subscription and the plan becomes free.',
      response: { 200: ref(SubscriptionResponse), ...errorResponses(404, 502) }
    }
  }, async (request) => {
    const payments = fastify.requirePayments()
    const preferences = await getOrCreatePreferences(db, request.user.id)
    const subscriptionId = preferences.payment_subscription_id
    if (subscriptionId === null || !isLive(preferences.payment_subscription_status)) throw new NoActiveSubscriptionError()
    const state = await payments.cancelAtPeriodEnd(subscriptionId)
    const stored = await storeCancelAtPeriodEnd(db, request.user.id, state)
    return { success: true as const, data: toStoredSubscription(stored) }
  })
}

export default subscription
