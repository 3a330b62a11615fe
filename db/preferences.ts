// Preferences: one row per user. The user-editable fields only; billing writes its own.
import { sql, type Kysely } from 'kysely'
import type { Preferences, Toggle } from '../schemas/preferences.js'
import type { TaskStatus } from '../schemas/tasks.js'
import { prepareQuery } from './statements.js'
import type { Database, PreferencesRow } from './types.js'
import { keyHolder, type KeyAsk, type KeyHolderRow } from './api-keys.js'
import { tokenHolder, tokenHolds, type TokenAsk, type WithHolder } from './users.js'

const toggle = (on: boolean): Toggle => on ? 'enabled' : 'disabled'

/** What the API shows of the row (toPreferences). */
const PREFERENCE_COLUMNS = [
  'theme', 'language', 'timezone', 'plan', 'default_status', 'email_notifications', 'task_reminders', 'weekly_digest',
  'push_notifications', 'payment_customer_id', 'payment_subscription_id', 'payment_subscription_status', 'payment_price_id',
  'payment_current_period_end'
] as const
type PreferenceFields = Pick<PreferencesRow, typeof PREFERENCE_COLUMNS[number]>

export const toPreferences = (row: PreferenceFields): Preferences => ({
  theme: row.theme as Preferences['theme'],
  language: row.language,
  timezone: row.timezone,
  plan: row.plan as Preferences['plan'],
  defaultStatus: row.default_status,
  defaultTaskStatus: row.default_status,
  emailNotifications: toggle(row.email_notifications),
  taskReminders: toggle(row.task_reminders),
  weeklyDigest: toggle(row.weekly_digest),
  pushNotifications: toggle(row.push_notifications),
  paymentCustomerId: row.payment_customer_id,
  paymentSubscriptionId: row.payment_subscription_id,
  paymentSubscriptionStatus: row.payment_subscription_status,
  paymentPriceId: row.payment_price_id,
  paymentCurrentPeriodEnd: row.payment_current_period_end
})

/** The user-editable fields; undefined leaves a field as it is. */
export interface PreferenceChanges {
  theme?: Preferences['theme']
  language?: string
  timezone?: string | null
  defaultStatus?: TaskStatus
  emailNotifications?: boolean
  taskReminders?: boolean
  weeklyDigest?: boolean
  pushNotifications?: boolean
}

/**
 * Registration writes the row with the user (createUserWithPreferences), so a user without one
 * is a defect, not a first visit: reads never write, and say so instead of hiding it.
 */
export class MissingPreferencesError extends Error {
  constructor (userId: string) {
    super(`user ${userId} has no preferences row`)
    this.name = 'MissingPreferencesError'
  }
}

// GET /preferences, which a client reads on every start: compiled once and run as a named
// statement (db/engine/prepared.ts) instead of built by Kysely, sent as text, parsed and
// planned again on every request; only the columns the answer shows.
const preferencesForUser = prepareQuery('preferences_get', (db, p: { userId: string }) => db
  .selectFrom('user_preferences').select(PREFERENCE_COLUMNS).where('user_id', '=', p.userId))

/** The user's preferences as the API shows them. */
export async function readPreferences (db: Kysely<Database>, userId: string): Promise<Preferences> {
  const [row] = await preferencesForUser.run(db, { userId })
  if (row === undefined) throw new MissingPreferencesError(userId)
  return toPreferences(row)
}

// The same with the token's check (`tokenInStatement`): the holder's row beside the
// preferences, in the one round trip, for a token that holds (db/users.ts, tokenHolds).
const preferencesForToken = prepareQuery('preferences_get_for_token', (db, p: TokenAsk) => db
  .with('holder', (db) => tokenHolder(db, p))
  .selectFrom('holder')
  .leftJoin('user_preferences', 'user_preferences.user_id', 'holder.id')
  .selectAll('holder')
  .select('user_preferences.user_id as preferences_of')
  .select(PREFERENCE_COLUMNS.map((column) => `user_preferences.${column}` as const))
  .where(tokenHolds(p.iat)))

/** readPreferences, reading the token's holder in the same statement; undefined when the token does not hold. */
export async function readPreferencesForToken (db: Kysely<Database>, token: TokenAsk): Promise<WithHolder<Preferences> | undefined> {
  const [row] = await preferencesForToken.run(db, token)
  if (row === undefined) return undefined
  if (row.preferences_of === null) throw new MissingPreferencesError(token.userId)
  return { holder: row, result: toPreferences(row as PreferenceFields) }
}

// The same with an API key's check (`keyInStatement`): the key's holder (db/api-keys.ts,
// keyHolder) beside the preferences; no row when the key does not live.
const preferencesForKey = prepareQuery('preferences_get_for_key', (db, p: KeyAsk) => db
  .with('holder', (db) => keyHolder(db, p))
  .selectFrom('holder')
  .leftJoin('user_preferences', 'user_preferences.user_id', 'holder.id')
  .selectAll('holder')
  .select('user_preferences.user_id as preferences_of')
  .select(PREFERENCE_COLUMNS.map((column) => `user_preferences.${column}` as const)))

/** readPreferences, reading the API key's holder in the same statement; undefined when the key does not live. */
export async function readPreferencesForKey (db: Kysely<Database>, key: KeyAsk): Promise<WithHolder<Preferences, KeyHolderRow> | undefined> {
  const [row] = await preferencesForKey.run(db, key)
  if (row === undefined) return undefined
  if (row.preferences_of === null) throw new MissingPreferencesError(key.userId)
  return { holder: row, result: toPreferences(row as PreferenceFields) }
}

/** The user's preferences. */
export async function getPreferences (db: Kysely<Database>, userId: string): Promise<PreferencesRow> {
  const row = await db.selectFrom('user_preferences').selectAll().where('user_id', '=', userId).executeTakeFirst()
  if (row === undefined) throw new MissingPreferencesError(userId)
  return row
}

export async function updatePreferences (db: Kysely<Database>, userId: string, changes: PreferenceChanges): Promise<PreferencesRow> {
  const row = await db.updateTable('user_preferences')
    .set({
      ...(changes.theme !== undefined && { theme: changes.theme }),
      ...(changes.language !== undefined && { language: changes.language }),
      ...(changes.timezone !== undefined && { timezone: changes.timezone }),
      ...(changes.defaultStatus !== undefined && { default_status: changes.defaultStatus }),
      ...(changes.emailNotifications !== undefined && { email_notifications: changes.emailNotifications }),
      ...(changes.taskReminders !== undefined && { task_reminders: changes.taskReminders }),
      ...(changes.weeklyDigest !== undefined && { weekly_digest: changes.weeklyDigest }),
      ...(changes.pushNotifications !== undefined && { push_notifications: changes.pushNotifications }),
      updated_at: sql`now()`
    })
    .where('user_id', '=', userId)
    .returningAll()
    .executeTakeFirst()
  if (row === undefined) throw new MissingPreferencesError(userId)
  return row
}
