// Internal usage tracking (task_created, subscription_upgraded); never sent to clients.
// task_created is written with its task, in the same statement (db/tasks.ts createTask).
import type { Kysely } from 'kysely'
import type { Database } from './types.js'

export type UsageEvent =
  { name: 'subscription_upgraded', userId: string, properties: { userId: string, plan: string } }

export async function recordUsageEvent (db: Kysely<Database>, event: UsageEvent): Promise<void> {
  await db.insertInto('usage_events')
    .values({ user_id: event.userId, name: event.name, properties: JSON.stringify(event.properties) })
    .execute()
}
