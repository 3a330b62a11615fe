// Billing state in user_preferences, the ledger of applied provider events, and the provider
// actions they decided on: read and written here, decided in billing/service.ts (with the rules
// of billing/rules.ts).
import { sql, type Kysely } from 'kysely'
import type { Subscription } from '../schemas/billing.js'
import type { BillingState, Database, PreferencesRow, ProviderActionKind, ProviderActionReason, SubscriptionTarget, Version } from './types.js'

export const toStoredSubscription = (row: PreferencesRow): Subscription => {
  const plan = row.plan as Subscription['plan']
  return {
    plan,
    status: row.payment_subscription_status,
    subscriptionId: row.payment_subscription_id,
    priceId: row.payment_price_id,
    currentPeriodEnd: row.payment_current_period_end,
    cancelAtPeriodEnd: row.cancel_at_period_end,
    subscription: row.payment_subscription_id === null
      ? null
      : {
          id: row.payment_subscription_id,
          customerId: row.payment_customer_id,
          status: row.payment_subscription_status,
          priceId: row.payment_price_id,
          currentPeriodEnd: row.payment_current_period_end,
          cancelAtPeriodEnd: row.cancel_at_period_end,
          plan
        }
  }
}

/**
 * Stores the customer id unless one is stored already; returns the one that is stored
 * (ours, or the one a concurrent request stored first).
 */
export async function linkCustomer (db: Kysely<Database>, userId: string, customerId: string): Promise<string> {
  await db.updateTable('user_preferences')
    .set({ payment_customer_id: customerId, updated_at: sql`now()` })
    .where('user_id', '=', userId).where('payment_customer_id', 'is', null)
    .execute()
  const row = await db.selectFrom('user_preferences').select('payment_customer_id').where('user_id', '=', userId).executeTakeFirstOrThrow()
  return row.payment_customer_id ?? customerId
}

export async function isPaymentEventRecorded (db: Kysely<Database>, id: string): Promise<boolean> {
  return (await db.selectFrom('payment_events').select('id').where('id', '=', id).executeTakeFirst()) !== undefined
}

/**
 * Records a provider event id. False when it was recorded before: the event was applied
 * already. Two concurrent deliveries race on the primary key, so exactly one wins.
 */
export async function recordPaymentEvent (db: Kysely<Database>, event: { id: string, type: string, created: Date }): Promise<boolean> {
  const inserted = await db.insertInto('payment_events')
    .values({ id: event.id, type: event.type, provider_created_at: event.created })
    .onConflict((oc) => oc.column('id').doNothing())
    .returning('id')
    .executeTakeFirst()
  return inserted !== undefined
}

const versionOf = (at: string | null, precedence: number): Version | null => at === null ? null : { at: new Date(at), precedence }
const dateOf = (value: string | null): Date | null => value === null ? null : new Date(value)

function billingStateOf (row: PreferencesRow): BillingState {
  return {
    subscriptionId: row.payment_subscription_id,
    status: row.payment_subscription_status,
    priceId: row.payment_price_id,
    currentPeriodEnd: dateOf(row.payment_current_period_end),
    cancelAtPeriodEnd: row.cancel_at_period_end,
    statusVersion: versionOf(row.payment_state_at, row.payment_state_precedence),
    periodEndVersion: versionOf(row.payment_period_end_at, row.payment_period_end_precedence),
    termsVersion: versionOf(row.payment_terms_at, row.payment_terms_precedence)
  }
}

/**
 * The stored subscription of the user an event targets, its row locked until the caller's
 * transaction ends (concurrent deliveries then apply one after the other); undefined when no
 * user matches.
 */
export async function lockBillingState (db: Kysely<Database>, target: SubscriptionTarget): Promise<{ userId: string, state: BillingState } | undefined> {
  let query = db.selectFrom('user_preferences').selectAll().forUpdate()
  query = 'userId' in target ? query.where('user_id', '=', target.userId) : query.where('payment_customer_id', '=', target.customerId)
  const row = await query.executeTakeFirst()
  return row === undefined ? undefined : { userId: row.user_id, state: billingStateOf(row) }
}

/** Stores the user's subscription state with its plan, and the provider customer when given. */
export async function storeBillingState (db: Kysely<Database>, userId: string, state: BillingState, extra: { plan: string, customerId?: string }): Promise<void> {
  await db.updateTable('user_preferences')
    .set({
      ...(extra.customerId !== undefined && { payment_customer_id: extra.customerId }),
      payment_subscription_id: state.subscriptionId,
      payment_subscription_status: state.status,
      payment_price_id: state.priceId,
      payment_current_period_end: state.currentPeriodEnd,
      cancel_at_period_end: state.cancelAtPeriodEnd,
      plan: extra.plan,
      payment_state_at: state.statusVersion?.at ?? null,
      payment_state_precedence: state.statusVersion?.precedence ?? 0,
      payment_period_end_at: state.periodEndVersion?.at ?? null,
      payment_period_end_precedence: state.periodEndVersion?.precedence ?? 0,
      payment_terms_at: state.termsVersion?.at ?? null,
      payment_terms_precedence: state.termsVersion?.precedence ?? 0,
      updated_at: sql`now()`
    })
    .where('user_id', '=', userId)
    .execute()
}

/**
 * Stores the checkout session just opened for the user and returns the one it replaces
 * (null when none). One statement that locks the row while it reads the previous id, so
 * of concurrent checkouts each learns of exactly the one it replaced, and only the last
 * stays stored: expiring every returned id leaves one session open.
 */
export async function replaceOpenCheckoutSession (db: Kysely<Database>, userId: string, sessionId: string): Promise<string | null> {
  const previous = db.selectFrom('user_preferences')
    .select(['id', 'payment_checkout_session_id as previousSessionId'])
    .where('user_id', '=', userId)
    .forUpdate()
    .as('previous')
  const row = await db.updateTable('user_preferences as p')
    .from(previous)
    .set({ payment_checkout_session_id: sessionId, updated_at: sql`now()` })
    .whereRef('p.id', '=', 'previous.id')
    .returning('previous.previousSessionId')
    .executeTakeFirst()
  return row?.previousSessionId ?? null
}

/** A completed checkout session is no longer the user's open one. */
export async function forgetCheckoutSession (db: Kysely<Database>, userId: string, sessionId: string): Promise<void> {
  await db.updateTable('user_preferences')
    .set({ payment_checkout_session_id: null })
    .where('user_id', '=', userId).where('payment_checkout_session_id', '=', sessionId)
    .execute()
}

/**
 * After a cancel request at the provider: its subscription marked to end with its period, when
 * it is still the stored one and still `live` (one of those statuses): the row, else undefined.
 * Only that mark is written: the status and the period are the webhooks' to keep, in their
 * order, and the provider's answer has no place in it (a deletion applied while it was on its
 * way stays).
 */
export function storeCancelAtPeriodEnd (db: Kysely<Database>, userId: string, subscriptionId: string, live: readonly string[], cancelAtPeriodEnd: boolean): Promise<PreferencesRow | undefined> {
  return db.updateTable('user_preferences')
    .set({ cancel_at_period_end: cancelAtPeriodEnd, updated_at: sql`now()` })
    .where('user_id', '=', userId)
    .where('payment_subscription_id', '=', subscriptionId)
    .where('payment_subscription_status', 'in', [...live])
    .returningAll()
    .executeTakeFirst()
}

/** Whether the user has a billing record (every account has one): false once the account is deleted. */
export async function hasBillingRecord (db: Kysely<Database>, userId: string): Promise<boolean> {
  return (await db.selectFrom('user_preferences').select('id').where('user_id', '=', userId).executeTakeFirst()) !== undefined
}

export interface ProviderAction {
  kind: ProviderActionKind
  subscriptionId: string
  reason: ProviderActionReason
  userId: string | null
  paymentEventId: string | null
}

/** A queued provider action as the worker claims it. */
export interface ClaimedProviderAction extends ProviderAction {
  id: string
  attempts: number
  createdAt: string
}

/**
 * Queues a provider call, in the caller's transaction (with the decision that needs it).
 * False when the same action for the same subscription is queued already.
 */
export async function queueProviderAction (db: Kysely<Database>, action: ProviderAction): Promise<boolean> {
  const inserted = await db.insertInto('billing_provider_actions')
    .values({
      kind: action.kind,
      subscription_id: action.subscriptionId,
      reason: action.reason,
      user_id: action.userId,
      payment_event_id: action.paymentEventId
    })
    .onConflict((oc) => oc.columns(['kind', 'subscription_id']).doNothing())
    .returning('subscription_id')
    .executeTakeFirst()
  return inserted !== undefined
}

/**
 * Takes the oldest due action for `leaseMs`, in one statement (no transaction stays open
 * while the provider is called): until the lease ends no other worker takes it, and one
 * that dies mid-call leaves it to be taken again once the lease ends.
 */
export async function claimDueProviderAction (db: Kysely<Database>, leaseMs: number): Promise<ClaimedProviderAction | undefined> {
  const row = await db.updateTable('billing_provider_actions')
    .set({
      locked_until: sql`now() + ${Math.round(leaseMs)}::int * interval '1 millisecond'`,
      attempts: sql`attempts + 1`
    })
    .where('id', 'in', (eb) => eb.selectFrom('billing_provider_actions').select('id')
      .where('done_at', 'is', null)
      .where('failed_at', 'is', null)
      .where('next_attempt_at', '<=', sql<string>`now()`)
      .where((w) => w.or([w('locked_until', 'is', null), w('locked_until', '<', sql<string>`now()`)]))
      .orderBy('next_attempt_at').orderBy('id')
      .limit(1)
      .forUpdate()
      .skipLocked())
    .returning([sql<string>`id::text`.as('id'), 'kind', 'subscription_id', 'reason', 'user_id', 'payment_event_id', 'attempts', 'created_at'])
    .executeTakeFirst()
  if (row === undefined) return undefined
  return {
    id: row.id,
    kind: row.kind,
    subscriptionId: row.subscription_id,
    reason: row.reason,
    userId: row.user_id,
    paymentEventId: row.payment_event_id,
    attempts: Number(row.attempts),
    createdAt: row.created_at
  }
}

export async function markProviderActionDone (db: Kysely<Database>, id: string): Promise<void> {
  await db.updateTable('billing_provider_actions')
    .set({ done_at: sql`now()`, locked_until: null, last_error: null })
    .where('id', '=', sql<string>`${id}::bigint`)
    .execute()
}

/** Failed for now: tried again after `delayMs`. */
export async function scheduleProviderActionRetry (db: Kysely<Database>, id: string, delayMs: number, error: string): Promise<void> {
  await db.updateTable('billing_provider_actions')
    .set({ next_attempt_at: sql`now() + ${Math.round(delayMs)}::int * interval '1 millisecond'`, locked_until: null, last_error: error })
    .where('id', '=', sql<string>`${id}::bigint`)
    .execute()
}

/** Given up: kept with its error for the operator. */
export async function markProviderActionFailed (db: Kysely<Database>, id: string, error: string): Promise<void> {
  await db.updateTable('billing_provider_actions')
    .set({ failed_at: sql`now()`, locked_until: null, last_error: error })
    .where('id', '=', sql<string>`${id}::bigint`)
    .execute()
}

/** Actions waiting to be carried out (queued or retrying), and those given up (kept 90 days). */
export async function countProviderActions (db: Kysely<Database>): Promise<{ pending: number, failed: number }> {
  const row = await db.selectFrom('billing_provider_actions')
    .select([
      sql<number>`(count(*) filter (where done_at is null and failed_at is null))::int`.as('pending'),
      sql<number>`(count(*) filter (where failed_at is not null))::int`.as('failed')
    ])
    .executeTakeFirstOrThrow()
  return { pending: Number(row.pending), failed: Number(row.failed) }
}

/** Milliseconds until the next waiting action is due (0 when one is due now), or null when none waits. */
export async function msUntilNextProviderAction (db: Kysely<Database>): Promise<number | null> {
  const row = await db.selectFrom('billing_provider_actions')
    // Clamped here, not with greatest(0, …): PostgreSQL's greatest ignores a NULL, so with no
    // action waiting it answered 0, and the worker polled every 10 ms (issue 30).
    .select(sql<number | null>`ceil(extract(epoch from (min(greatest(next_attempt_at, coalesce(locked_until, next_attempt_at))) - now())) * 1000)::int`.as('wait'))
    .where('done_at', 'is', null)
    .where('failed_at', 'is', null)
    .executeTakeFirstOrThrow()
  return row.wait === null ? null : Math.max(0, Number(row.wait))
}

/** Housekeeping: done actions after 30 days, given-up ones after 90. */
export async function purgeProviderActions (db: Kysely<Database>): Promise<void> {
  await db.deleteFrom('billing_provider_actions').where('done_at', '<', sql<string>`now() - interval '30 days'`).execute()
  await db.deleteFrom('billing_provider_actions').where('failed_at', '<', sql<string>`now() - interval '90 days'`).execute()
}
