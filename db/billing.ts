// Billing state in user_preferences, and the ledger of applied provider events.
import { sql, type Kysely } from 'kysely'
import type { Subscription } from '../schemas/billing.js'
import type { Database, PreferencesRow } from './types.js'

/** Statuses in which the user has what they paid for. */
export const LIVE_STATUSES = ['active', 'trialing', 'past_due'] as const
export const isLive = (status: string | null): boolean => (LIVE_STATUSES as readonly string[]).includes(status ?? '')
/** Plan is `pro` while the subscription is live, else `free`. */
export const planFor = (status: string | null): 'pro' | 'free' => isLive(status) ? 'pro' : 'free'

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

export type SubscriptionTarget = { userId: string } | { subscriptionId: string } | { customerId: string }

export interface SubscriptionChange {
  customerId?: string
  subscriptionId?: string
  status?: string
  priceId?: string | null
  currentPeriodEnd?: Date | null
  cancelAtPeriodEnd?: boolean
}

export type ApplyResult = { outcome: 'applied', userId: string, plan: string, previousPlan: string } | { outcome: 'stale' } | { outcome: 'unknown' }

/**
 * Applies a subscription change made at the provider at `at`, unless the stored state
 * comes from a newer event (late deliveries never roll the state back). The plan follows
 * the resulting status.
 */
export async function applySubscriptionChange (
  db: Kysely<Database>,
  target: SubscriptionTarget,
  change: SubscriptionChange,
  at: Date
): Promise<ApplyResult> {
  let query = db.selectFrom('user_preferences').selectAll().forUpdate()
  if ('userId' in target) query = query.where('user_id', '=', target.userId)
  else if ('subscriptionId' in target) query = query.where('payment_subscription_id', '=', target.subscriptionId)
  else query = query.where('payment_customer_id', '=', target.customerId)
  const row = await query.executeTakeFirst()
  if (row === undefined) return { outcome: 'unknown' }
  if (row.payment_state_at !== null && Date.parse(row.payment_state_at) > at.getTime()) return { outcome: 'stale' }

  const status = change.status ?? row.payment_subscription_status
  const plan = planFor(status)
  await db.updateTable('user_preferences')
    .set({
      ...(change.customerId !== undefined && { payment_customer_id: change.customerId }),
      ...(change.subscriptionId !== undefined && { payment_subscription_id: change.subscriptionId }),
      ...(change.status !== undefined && { payment_subscription_status: change.status }),
      ...(change.priceId !== undefined && { payment_price_id: change.priceId }),
      ...(change.currentPeriodEnd !== undefined && { payment_current_period_end: change.currentPeriodEnd }),
      ...(change.cancelAtPeriodEnd !== undefined && { cancel_at_period_end: change.cancelAtPeriodEnd }),
      plan,
      payment_state_at: at,
      updated_at: sql`now()`
    })
    .where('id', '=', row.id)
    .execute()
  return { outcome: 'applied', userId: row.user_id, plan, previousPlan: row.plan }
}

/** After a cancel request at the provider: the stored copy of what it answered. */
export async function storeCancelAtPeriodEnd (db: Kysely<Database>, userId: string, change: { status: string, currentPeriodEnd: Date | null, cancelAtPeriodEnd: boolean }): Promise<PreferencesRow> {
  return db.updateTable('user_preferences')
    .set({
      payment_subscription_status: change.status,
      payment_current_period_end: change.currentPeriodEnd,
      cancel_at_period_end: change.cancelAtPeriodEnd,
      plan: planFor(change.status),
      updated_at: sql`now()`
    })
    .where('user_id', '=', userId)
    .returningAll()
    .executeTakeFirstOrThrow()
}
