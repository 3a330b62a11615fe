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
  fastify.decorate('payments', config.payments.secretKey
    ? createStripeProvider({
      secretKey: config.payments.secretKey,
      apiUrl: config.payments.apiUrl,
      timeoutMs: config.payments.timeoutMs,
      maxNetworkRetries: config.payments.maxRetries,
      appUrl: config.http.appUrl,
      webhookSecret: config.payments.webhookSecret,
      log: fastify.log,
      tracerProvider: fastify.tracerProvider
    })
    : UNCONFIGURED_PROVIDER)
}, { name: 'payments', dependencies: ['tracing'] })
