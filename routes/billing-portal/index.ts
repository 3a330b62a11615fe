// The provider's customer portal (payment methods, invoices, plan changes).
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { RedirectUrl } from '../../schemas/billing.js'
import { errorResponses, Success } from '../../schemas/common.js'

const billingPortal: FastifyPluginAsyncTypebox = async (fastify) => {
  fastify.post('', {
    // With an Idempotency-Key, a retry opens the same portal session.
    config: { idempotent: 'lease' },
    schema: {
      tags: ['billing'],
      operationId: 'createBillingPortalSession',
      summary: 'Open the billing portal',
      description: 'Returns the portal URL; the portal returns the user to APP_URL. 404 when the user has no provider customer yet.',
      response: { 200: Success(RedirectUrl), ...errorResponses(404, 502) }
    }
  }, async (request) => {
    const url = await fastify.billing.openBillingPortal(request.user.id, { idempotencyKey: request.idempotentRequestId ?? undefined })
    return { success: true as const, data: { url } }
  })
}

export default billingPortal
