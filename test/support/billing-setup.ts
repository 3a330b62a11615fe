// The billing tests' one set-up: a Stripe stand-in (closed at teardown), the app built as
// helper.build() builds it with billing configured against the stand-in, and the steps the
// billing tests take over and over (a user, a checkout, a signed webhook delivery, the stored
// row). Each file gets its own stand-in and app.
import { randomUUID } from 'node:crypto'
import { createUserWithPreferences } from '../../db/users.js'
import { build, buildKeepingLog, json } from './helper.js'
import { checkoutSessionCompleted, signedDelivery } from './stripe-events.js'
import { startStripeStandIn, type StripeStandIn } from './stripe-stand-in.js'

export const PRICE = 'price_pro_monthly'
export const SECRET_KEY = 'sk_test_standin'
export const WEBHOOK_SECRET = 'whsec_test_0123456789abcdef'

interface Teardown { teardown: (fn: () => unknown) => void }

export interface BillingSetupOptions {
  /** More settings, or other values for the payment ones below. */
  env?: Record<string, string>
  /** Keep the app's log lines (at LOG_LEVEL warn unless `env` says otherwise) in `logLines`. */
  keepLog?: boolean
}

/** A user straight in the database (no password hashing: such users never sign in). */
export interface DirectUser { id: string, auth: { authorization: string } }

export interface DeliveryOptions { secret?: string, timestamp?: number, body?: string, headers?: Record<string, string> }

export async function billingSetup (t: Teardown, options: BillingSetupOptions = {}) {
  const stripe: StripeStandIn = await startStripeStandIn()
  t.teardown(() => stripe.close())
  const env = {
    PAYMENT_SECRET_KEY: SECRET_KEY,
    PAYMENT_WEBHOOK_SECRET: WEBHOOK_SECRET,
    PAYMENT_PRICE_IDS: `${PRICE}, price_pro_yearly`,
    PAYMENT_API_URL: stripe.url,
    PAYMENT_MAX_RETRIES: '0',
    PAYMENT_TIMEOUT_MS: '2000',
    ...options.env
  }
  const logLines: string[] = []
  const app = options.keepLog === true ? await buildKeepingLog(t, { LOG_LEVEL: 'warn', ...env }, logLines) : await build(t, env)
  const webhookSecret = env.PAYMENT_WEBHOOK_SECRET

  /** A signed delivery to the webhook (another secret, time, raw body or headers when asked). */
  const deliver = (event: unknown, opts: DeliveryOptions = {}) => {
    const { body, headers } = signedDelivery(event, opts.secret ?? webhookSecret, opts)
    return app.inject({ method: 'POST', url: '/webhooks/payment', headers: { ...headers, ...opts.headers }, payload: body })
  }

  async function newUser (label = 'billing'): Promise<DirectUser> {
    const id = randomUUID()
    const email = `${label}-${id}@example.com`
    await createUserWithPreferences(app.db, { id, name: null, email, passwordHash: 'unused' })
    return { id, auth: { authorization: `Bearer ${app.jwt.sign({ sub: id, email, jti: randomUUID() })}` } }
  }

  /** POST /checkout for `priceId` (PRICE by default); the session id, or a throw unless 200. */
  async function checkout (user: { auth: { authorization: string } }, priceId = PRICE): Promise<string> {
    const res = await app.inject({ method: 'POST', url: '/checkout', headers: user.auth, payload: { priceId } })
    if (res.statusCode !== 200) throw new Error(`checkout failed: ${res.statusCode} ${res.body}`)
    return json(res).data.sessionId
  }

  /** Checkout through the API, then the stand-in completes it and its webhook (dated `created`) arrives. */
  async function subscribe (user: { auth: { authorization: string } }, opts: { created?: number } = {}) {
    const { session, subscription } = stripe.completeCheckout(await checkout(user))
    const delivered = await deliver(checkoutSessionCompleted(session, opts))
    if (delivered.statusCode !== 200) throw new Error(`webhook failed: ${delivered.statusCode} ${delivered.body}`)
    return { session, subscription }
  }

  const stored = (user: { id: string }) =>
    app.db.selectFrom('user_preferences').selectAll().where('user_id', '=', user.id).executeTakeFirstOrThrow()
  const eventRecorded = async (id: string) =>
    (await app.db.selectFrom('payment_events').select('id').where('id', '=', id).executeTakeFirst()) !== undefined
  /** The kept log lines (keepLog) at `level` with `message`. */
  const logged = (level: number, message: string) =>
    logLines.map((line) => JSON.parse(line)).filter((entry) => entry.level === level && entry.msg === message)

  return { app, stripe, webhookSecret, logLines, deliver, newUser, checkout, subscribe, stored, eventRecorded, logged }
}
