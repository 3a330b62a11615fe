// fastify.billingActions: the worker that carries out the provider calls webhooks decided on
// (billing/provider-actions.ts), started once the app is ready and stopped before the
// database closes; and its gauge.
import fp from 'fastify-plugin'
import { createProviderActionWorker, type ProviderActionWorker } from '../../billing/provider-actions.js'
import { countProviderActions } from '../../db/billing.js'

declare module 'fastify' {
  interface FastifyInstance {
    billingActions: ProviderActionWorker
  }
}

// The SDK's own wait between its retries is at most 5 s (stripe-node's maxNetworkRetryDelay).
const SDK_RETRY_DELAY_MS = 5_000

export default fp(async function billingActions (fastify) {
  const { config, db, log, payments } = fastify
  // One attempt is at most two provider requests (a cancel, and a look-up when refused), each
  // tried PAYMENT_MAX_RETRIES + 1 times for up to PAYMENT_TIMEOUT_MS: the lease is twice
  // that, so it ends only for a worker that died, and another one never calls alongside.
  const perRequest = (config.payments.maxRetries + 1) * config.payments.timeoutMs + config.payments.maxRetries * SDK_RETRY_DELAY_MS
  const worker = createProviderActionWorker({
    db,
    provider: payments,
    log: log.child({ worker: 'billing-actions' }),
    retryBaseMs: config.payments.actionRetryBaseMs,
    leaseMs: Math.max(60_000, 2 * 2 * perRequest)
  })

  // Read when scraped; a database that does not answer leaves the last values.
  fastify.metrics.gauge({
    name: 'billing_provider_actions',
    help: 'Provider calls webhooks decided on (cancelling a subscription nobody may be billed for), by state: pending (waiting or retrying; growing: the provider is failing) and failed (given up: an operator must act, docs/billing.md)',
    labelNames: ['state'] as const,
    read: async () => {
      const counts = await countProviderActions(db)
      return [{ labels: { state: 'pending' }, value: counts.pending }, { labels: { state: 'failed' }, value: counts.failed }]
    }
  })

  fastify.decorate('billingActions', worker)
  // Without billing nothing can be carried out: no polling (queued actions wait, the gauge
  // shows them). With it, the scheduler starts the worker once the app is ready and stops it
  // before the database closes: a call in flight may finish; one that does not is attempted
  // again once its lease ends, here after a restart or on another instance.
  if (config.payments.secretKey !== undefined) fastify.jobs.add(worker)
}, { name: 'billing-actions', dependencies: ['db', 'metrics', 'payments', 'scheduler'] })
