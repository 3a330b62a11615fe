// The provider's customer portal (payment methods, invoices, plan changes).
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { getOrCreatePreferences } from '../../db/preferences.js'
import { RedirectUrl } from '../../schemas/billing.js'
import { errorResponses, Success } from '../../schemas/common.js'
import { NoBillingAccountError } from '../../schemas/errors.js'

const billingPortal: FastifyPluginAsyncTypebox = async (fastify) => {
  fastify.post('', {
    schema: {
      tags: ['billing'],
      operationId: 'createBillingPortalSession',
      summary: 'Open the billing portal',
      description: 'Returns the portal URL; the portal returns the user to APP_URL. 404 when the user has no provider customer yet.',
      response: { 200: Success(RedirectUrl), ...errorResponses(404, 502) }
    }
  }, async (request) => {
    const payments = fastify.requirePayments()
    const { payment_customer_id: customerId } = await getOrCreatePreferences(fastify.db, request.user.id)
    if (customerId === null) throw new NoBillingAccountError()
    return { success: true as const, data: { url: await payments.createPortalSession(customerId) } }
  })
}

export default billingPortal
