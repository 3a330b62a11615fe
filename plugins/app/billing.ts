// fastify.billing: billing as the routes call it (billing/service.ts), on the payment provider
// (fastify.payments) and the worker that carries out what webhooks decide (fastify.billingActions).
import fp from 'fastify-plugin'
import { createBillingService, type BillingService } from '../../billing/service.js'

declare module 'fastify' {
  interface FastifyInstance {
    billing: BillingService
  }
}

export default fp(async function billing (fastify) {
  fastify.decorate('billing', createBillingService({
    db: fastify.db,
    provider: fastify.payments,
    priceIds: fastify.config.payments.priceIds,
    providerActions: fastify.billingActions
  }))
}, { name: 'billing', dependencies: ['db', 'payments', 'billing-actions'] })
