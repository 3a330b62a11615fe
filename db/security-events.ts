// The security-events feed (docs/sessions.md): what happened to an account, kept 90 days.
// Failed sign-ins are one row per user and UTC day that counts them.
import { sql, type Kysely } from 'kysely'
import type { Database, SecurityEventRow } from './types.js'

export const SECURITY_EVENTS_KEPT_DAYS = 90

export interface NewSecurityEvent {
  userId: string
  type: string
  method?: string | null
  provider?: string | null
  address?: string | null
  userAgent?: string | null
}

export async function recordSecurityEvent (db: Kysely<Database>, event: NewSecurityEvent): Promise<void> {
  await db.insertInto('security_events')
    .values({
      user_id: event.userId,
      type: event.type,
      method: event.method ?? null,
      provider: event.provider ?? null,
      address: event.address ?? null,
      user_agent: event.userAgent ?? null
    })
    .execute()
}

/** One more failed sign-in today; the row keeps the first failure's time (its place in the feed) and the last one's address and agent. */
export async function recordFailedSignIn (db: Kysely<Database>, event: Omit<NewSecurityEvent, 'type'>): Promise<void> {
  await db.insertInto('security_events')
    .values({ user_id: event.userId, type: 'sign-in-failed', method: event.method ?? null, address: event.address ?? null, user_agent: event.userAgent ?? null })
    .onConflict((oc) => oc.columns(['user_id', 'day']).where(sql<boolean>`type = 'sign-in-failed'`).doUpdateSet({
      count: sql`security_events.count + 1`,
      method: (eb) => eb.ref('excluded.method'),
      address: (eb) => eb.ref('excluded.address'),
      user_agent: (eb) => eb.ref('excluded.user_agent')
    }))
    .execute()
}

/**
 * The user's events of the last 90 days, newest first, after the event `before` (an id the
 * previous page ended on): a keyset, so events recorded meanwhile shift nothing. One more than
 * `limit` tells whether a page follows.
 */
export function listSecurityEvents (db: Kysely<Database>, userId: string, page: { limit: number, before?: string }): Promise<SecurityEventRow[]> {
  let query = db.selectFrom('security_events').selectAll()
    .where('user_id', '=', userId)
    .where('created_at', '>', sql<string>`now() - make_interval(days => ${SECURITY_EVENTS_KEPT_DAYS})`)
  if (page.before !== undefined) {
    // An unknown cursor (or another user's) compares to null: an empty page.
    query = query.where(sql<boolean>`(created_at, id) < (select c.created_at, c.id from security_events c where c.id = ${page.before} and c.user_id = ${userId})`)
  }
  return query.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(page.limit + 1).execute()
}

/** Events older than 90 days: a job of plugins/app/sessions.ts. */
export async function purgeOldSecurityEvents (db: Kysely<Database>): Promise<number> {
  const result = await db.deleteFrom('security_events')
    .where('created_at', '<', sql<string>`now() - make_interval(days => ${SECURITY_EVENTS_KEPT_DAYS})`)
    .executeTakeFirst()
  return Number(result.numDeletedRows)
}
