// fastify.payments: the payment provider (billing/provider.ts), Stripe's when PAYMENT_SECRET_KEY
// is set (billing/stripe-provider.ts), else one whose every use is a 503 `Billing is not
// configured` while the rest of the service runs.
import fp from 'fastify-plugin'
import { UNCONFIGURED_PROVIDER, type PaymentProvider } from '../../billing/provider.js'
import { createStripeProvider } from '../../billing/stripe-provider.js'

declare module 'fastify' {
  interface FastifyInstance {
    payments: PaymentProvider
  }
}

export default fp(async function payments (fastify) {
  const { config } = fastify
  fastify.decorate('payments', config.PAYMENT_SECRET_KEY
    ? createStripeProvider({
      secretKey: config.PAYMENT_SECRET_KEY,
      apiUrl: config.PAYMENT_API_URL,
      timeoutMs: config.PAYMENT_TIMEOUT_MS,
      maxNetworkRetries: config.PAYMENT_MAX_RETRIES,
      appUrl: config.APP_URL,
      webhookSecret: config.PAYMENT_WEBHOOK_SECRET,
      log: fastify.log,
      tracer: fastify.tracer
    })
    : UNCONFIGURED_PROVIDER)
}, { name: 'payments', dependencies: ['tracing'] })
