// npm run stripe:dev: the project's Stripe stand-in (test/support/stripe-stand-in.ts, the one the
// tests use) on a port, with Stripe's hosted checkout and billing portal pages: their buttons
// deliver the signed webhook events to the service. Billing on one machine, no Stripe account:
// docs/billing.md, "Trying it locally".
//
//   npm run stripe:dev [-- --port 12111 --webhook-url http://127.0.0.1:3002/webhooks/payment]
import { parseArgs } from 'node:util'
import { startStripeStandIn } from '../test/support/stripe-stand-in.js'

const { values } = parseArgs({
  options: {
    port: { type: 'string', default: '12111' },
    'webhook-url': { type: 'string', default: 'http://127.0.0.1:3002/webhooks/payment' },
    'webhook-secret': { type: 'string', default: 'whsec_local_stripe_stand_in' }
  }
})
const port = Number(values.port)
if (!Number.isInteger(port) || port < 0 || port > 65_535) throw new Error(`--port: not a port: ${values.port}`)
const webhookUrl = values['webhook-url']
const webhookSecret = values['webhook-secret']

const stripe = await startStripeStandIn({
  port,
  hostedPages: {
    webhookUrl,
    webhookSecret,
    onDelivery: (d) => console.log(`webhook ${d.type} ${d.eventId} -> ${d.status ?? 'not delivered'}${d.status === 200 ? '' : ` ${d.answer}`}`)
  }
})

// The stand-in takes any sk_test_ key and any price_ id (a monthly price of 10.00 USD).
console.log(`Stripe stand-in on ${stripe.url}: checkout and portal pages there too; webhooks to ${webhookUrl}
Put these in .env (or the environment) and restart the service:

PAYMENT_API_URL=${stripe.url}
PAYMENT_SECRET_KEY=sk_test_local
PAYMENT_WEBHOOK_SECRET=${webhookSecret}
PAYMENT_PRICE_IDS=price_pro_monthly,price_pro_yearly
`)

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => { stripe.close().then(() => process.exit(0), () => process.exit(1)) })
}
