// Provider calls a webhook decides on run after its transaction commits, never inside it: a
// slow provider holds up no one and the webhook is answered once its event is recorded; a
// failing provider is retried until the call is done; a refusal meant for good is given up
// with an error for the operator, not retried for days; and a subscription that has ended
// (or is gone) at the provider means the cancel is done.
import { sql, type KyselyPlugin } from 'kysely'
import t from 'tap'
import { createProviderActionWorker } from '../../billing/provider-actions.js'
import { msUntilNextProviderAction } from '../../db/billing.js'
import { billingSetup, WEBHOOK_SECRET } from '../support/billing-setup.js'
import { uniqueEmail, until } from '../support/helper.js'
import { checkoutSessionCompleted } from '../support/stripe-events.js'

// The log lines kept; retries due at once: the tests call runOnce() instead of waiting.
const setup = await billingSetup(t, { keepLog: true, env: { PAYMENT_TIMEOUT_MS: '5000', PAYMENT_ACTION_RETRY_BASE_MS: '10' } })
const { app, stripe, logLines, logged, deliver, checkout, stored, eventRecorded } = setup
const newUser = () => setup.newUser('actions')
type User = Awaited<ReturnType<typeof newUser>>

/** Two tabs: both checkouts paid; the first one's webhook has linked it. Returns [linked, extra]. */
async function twoPaidCheckouts (user: User) {
  const linked = stripe.completeCheckout(await checkout(user))
  const extra = stripe.completeCheckout(await checkout(user))
  const res = await deliver(checkoutSessionCompleted(linked.session))
  if (res.statusCode !== 200) throw new Error(`webhook failed: ${res.statusCode} ${res.body}`)
  return [linked, extra] as const
}

const actionsFor = (subscriptionId: string) =>
  app.db.selectFrom('billing_provider_actions').selectAll().where('subscription_id', '=', subscriptionId).execute()
const actionFor = async (subscriptionId: string) => (await actionsFor(subscriptionId))[0]
const cancelCalls = (subscriptionId: string) => stripe.calls.filter((c) => c.method === 'DELETE' && c.path === `/v1/subscriptions/${subscriptionId}`)
const statusAtProvider = (subscriptionId: string): string => stripe.subscriptions.get(subscriptionId).status

t.test('a slow provider holds no one up: the webhook answers once the cancel is recorded, other users are served meanwhile', async (t) => {
  const user = await newUser()
  const other = await newUser()
  const [linked, extra] = await twoPaidCheckouts(user)
  stripe.reset()
  const slow = stripe.holdNext({ method: 'DELETE', path: `/v1/subscriptions/${extra.subscription.id}` })

  const webhook = deliver(checkoutSessionCompleted(extra.session))
  await slow.arrived
  // While the provider works on the cancel, other users; on the embedded database they
  // share its one connection with the webhook.
  const tasks = await app.inject({ method: 'GET', url: '/tasks', headers: other.auth })
  t.equal(tasks.statusCode, 200, 'another user\'s tasks')
  t.ok(slow.pending, 'answered while the provider call was still pending')
  const registered = await app.inject({ method: 'POST', url: '/auth/register', payload: { email: uniqueEmail('while-slow'), password: 'correct horse battery', name: 'Meanwhile' } })
  t.equal(registered.statusCode, 201, 'a new user registers')
  t.ok(slow.pending, 'answered while the provider call was still pending')
  const answered = await webhook
  t.equal(answered.statusCode, 200, `the webhook is answered without waiting for the provider (${answered.body})`)
  t.ok(slow.pending, 'answered while the provider call was still pending')
  t.match(await actionFor(extra.subscription.id), { kind: 'cancel-subscription', reason: 'second-subscription', user_id: user.id, done_at: null, attempts: 1 },
    'the decision is recorded, the call under way')

  slow.release()
  await until(async () => (await actionFor(extra.subscription.id))?.done_at != null, 'the cancel recorded as done')
  t.equal(statusAtProvider(extra.subscription.id), 'canceled', 'the cancel reached the provider')
  t.equal(cancelCalls(extra.subscription.id).length, 1, 'once')
  t.equal(cancelCalls(extra.subscription.id)[0]?.idempotencyKey, `billing-action-${(await actionFor(extra.subscription.id))!.id}`, 'keyed by the action')
  t.equal(statusAtProvider(linked.subscription.id), 'active', 'the linked one still bills')
  t.match(await stored(user), { plan: 'pro', payment_subscription_status: 'active', payment_subscription_id: linked.subscription.id })
})

t.test('a failing provider: the webhook answers 200, the cancel is retried until done, a redelivery changes nothing', async (t) => {
  const user = await newUser()
  const [linked, extra] = await twoPaidCheckouts(user)
  stripe.reset()
  stripe.failNext(2, 'error', { method: 'DELETE', path: `/v1/subscriptions/${extra.subscription.id}` })
  const event = checkoutSessionCompleted(extra.session)

  const answered = await deliver(event)
  t.equal(answered.statusCode, 200, `the event is recorded, whatever the provider does next (${answered.body})`)
  t.ok(await eventRecorded(event.id))
  await until(async () => {
    await app.billingActions.runOnce()
    return statusAtProvider(extra.subscription.id) === 'canceled'
  }, 'the cancel carried out')
  t.equal(cancelCalls(extra.subscription.id).length, 3, 'two failures, then done')
  const action = (await actionFor(extra.subscription.id))!
  t.match(action, { attempts: 3, last_error: null, failed_at: null })
  t.ok(action.done_at, 'done')
  t.equal(logged(40, 'billing provider action failed: will retry').filter((entry) => entry.subscriptionId === extra.subscription.id).length, 2,
    'each failure is a warning')

  stripe.reset()
  const redelivered = await deliver(event)
  t.equal(redelivered.statusCode, 200)
  await app.billingActions.runOnce()
  t.same(stripe.calls, [], 'a redelivery asks nothing of the provider')
  t.equal((await actionsFor(extra.subscription.id)).length, 1, 'and queues nothing more')
  t.match(await stored(user), { plan: 'pro', payment_subscription_status: 'active', payment_subscription_id: linked.subscription.id })
})

t.test('a checkout paid before the account was deleted and delivered after it: 200, nothing to cancel, nothing retried', async (t) => {
  const user = await newUser()
  const { session, subscription } = stripe.completeCheckout(await checkout(user))
  t.equal((await app.inject({ method: 'DELETE', url: '/account/delete', headers: user.auth })).statusCode, 200)
  t.equal(statusAtProvider(subscription.id), 'canceled', 'deleting the customer cancelled its subscription')
  stripe.reset()

  const event = checkoutSessionCompleted(session)
  const late = await deliver(event)
  t.equal(late.statusCode, 200, `the late webhook is acknowledged (${late.body})`)
  t.same(cancelCalls(subscription.id), [], 'no cancel asked for: the provider said it has ended')
  t.same(await actionsFor(subscription.id), [], 'nothing queued, to retry or to give up')
  await app.billingActions.runOnce()
  t.same(cancelCalls(subscription.id), [], 'nor later')
  t.ok(await eventRecorded(event.id))
  t.equal((await deliver(event)).statusCode, 200, 'a redelivery too')
  t.equal(statusAtProvider(subscription.id), 'canceled')
  t.equal(await app.db.selectFrom('user_preferences').select('id').where('user_id', '=', user.id).executeTakeFirst(), undefined, 'no billing record comes back')
})

t.test('a checkout whose subscription the provider no longer has: done for an account that is gone, left for the retry for a live one', async (t) => {
  const gone = await newUser()
  const { session, subscription } = stripe.completeCheckout(await checkout(gone))
  t.equal((await app.inject({ method: 'DELETE', url: '/account/delete', headers: gone.auth })).statusCode, 200)
  stripe.subscriptions.delete(subscription.id) // e.g. the test clock it ran on was deleted
  const event = checkoutSessionCompleted(session)
  const answered = await deliver(event)
  t.equal(answered.statusCode, 200, `nothing to link, nothing to cancel (${answered.body})`)
  t.ok(await eventRecorded(event.id))
  t.same(await actionsFor(subscription.id), [])

  // For a live account, a subscription the provider does not know is likelier a wrong key or
  // mode than a loss: not recorded, so the provider's retry applies it once that is fixed.
  const live = await newUser()
  const paid = stripe.completeCheckout(await checkout(live))
  stripe.subscriptions.delete(paid.subscription.id)
  const unknown = checkoutSessionCompleted(paid.session)
  t.equal((await deliver(unknown)).statusCode, 502)
  t.notOk(await eventRecorded(unknown.id))
  t.equal((await stored(live)).plan, 'free')
})

t.test('a cancel refused for a subscription that has ended counts as done', async (t) => {
  // Refused otherwise than with "No such subscription" (a cancel racing the customer's
  // deletion, an answer worded otherwise): checked against the subscription, and done.
  const deleted = await newUser()
  const { subscription } = stripe.completeCheckout(await checkout(deleted))
  t.equal((await app.inject({ method: 'DELETE', url: '/account/delete', headers: deleted.auth })).statusCode, 200)
  stripe.reset()
  stripe.failNext(1, 'refusal', { method: 'DELETE', path: `/v1/subscriptions/${subscription.id}` })
  t.equal(await app.payments.cancelNow(subscription.id), 'already-ended')
  t.same(stripe.calls.map((c) => `${c.method} ${c.path}`), [`DELETE /v1/subscriptions/${subscription.id}`, `GET /v1/subscriptions/${subscription.id}`],
    'refused, then looked up')
})

t.test('a cancel the provider refuses is given up at once, one failing for 7 days too: an error for the operator, not retried', async (t) => {
  // A live subscription the provider will not cancel: an operator must.
  const user = await newUser()
  const [, extra] = await twoPaidCheckouts(user)
  stripe.reset()
  stripe.failNext(1, 'refusal', { method: 'DELETE', path: `/v1/subscriptions/${extra.subscription.id}` })
  t.equal((await deliver(checkoutSessionCompleted(extra.session))).statusCode, 200)
  await until(async () => {
    await app.billingActions.runOnce()
    return (await actionFor(extra.subscription.id))?.failed_at != null
  }, 'the action given up')
  await app.billingActions.runOnce()
  t.equal(cancelCalls(extra.subscription.id).length, 1, 'asked once, not again')
  t.match(await actionFor(extra.subscription.id), { attempts: 1, done_at: null, last_error: /^subscriptions\.cancel invalid_request_error 400 req_/ })
  t.equal(statusAtProvider(extra.subscription.id), 'active', 'still billing: for the operator')
  t.match(logged(50, 'billing provider action given up: an operator must carry it out at the provider').at(-1),
    { subscriptionId: extra.subscription.id, userId: user.id, reason: 'second-subscription' })

  // A provider failing for longer than the give-up time (7 days): given up too.
  const late = await newUser()
  const [, lateExtra] = await twoPaidCheckouts(late)
  stripe.reset()
  // More failures than the attempts made before the clock is turned back (retries every 10 ms, doubling).
  stripe.failNext(100, 'error', { method: 'DELETE', path: `/v1/subscriptions/${lateExtra.subscription.id}` })
  t.equal((await deliver(checkoutSessionCompleted(lateExtra.session))).statusCode, 200)
  await app.billingActions.runOnce()
  await app.db.updateTable('billing_provider_actions')
    .set({ created_at: sql`now() - interval '7 days 1 minute'`, next_attempt_at: sql`now()` })
    .where('subscription_id', '=', lateExtra.subscription.id)
    .execute()
  // An attempt under way as the clock turned back still retries; the next one gives up.
  await until(async () => {
    await app.billingActions.runOnce()
    return (await actionFor(lateExtra.subscription.id))?.failed_at != null
  }, 'the action given up')
  t.match(await actionFor(lateExtra.subscription.id), { done_at: null, last_error: /^subscriptions\.cancel api_error 500/ })
  t.equal(statusAtProvider(lateExtra.subscription.id), 'active', 'still billing: for the operator')
  stripe.reset()

  const gauge = await app.metrics.registry.getSingleMetric('billing_provider_actions')!.get()
  const failed = gauge.values.find((v) => v.labels.state === 'failed')?.value ?? 0
  t.ok(failed >= 2, `the failed gauge counts them (${failed})`)
})

t.test('with no action waiting the worker is idle: a pass, then the next poll 30 s later, not a query every 10 ms', async (t) => {
  await sql`update billing_provider_actions set done_at = coalesce(done_at, now()) where failed_at is null`.execute(app.db)
  t.equal(await msUntilNextProviderAction(app.db), null, 'nothing waits: no time until the next one (it answered 0)')
  const statements: string[] = []
  const counting: KyselyPlugin = {
    transformQuery: (args) => { statements.push(args.node.kind); return args.node },
    transformResult: async (args) => args.result
  }
  const worker = createProviderActionWorker({ db: app.db.withPlugin(counting), provider: app.payments, log: app.log, retryBaseMs: 10, leaseMs: 60_000 })
  worker.start()
  await new Promise((resolve) => setTimeout(resolve, 500))
  await worker.stop()
  // The first pass: one claim (nothing due), the housekeeping's two deletes, the look for the next due action.
  t.ok(statements.length <= 4, `${statements.length} statements in half a second (${[...new Set(statements)].join(', ')})`)
  t.equal(statements.filter((kind) => kind === 'UpdateQueryNode').length, 1, 'one claim')
})

t.test('no secret or token in the log lines', async (t) => {
  t.ok(logLines.length > 0, `${logLines.length} lines`)
  const log = logLines.join('\n')
  for (const secret of ['sk_test_standin', WEBHOOK_SECRET, 'Bearer ', 'v1=']) t.notOk(log.includes(secret), `no ${secret}`)
})
