// Personal API keys (auth-extensions §5, docs/api-keys.md): rows of the api_keys table. A key
// lives while `revoked_at` is null or still ahead (a rotated key's grace) and `expires_at` is
// null or ahead; both are compared with the database's clock, in the query that reads the key.
import { sql, type Expression, type Kysely, type QueryCreator, type SqlBool } from 'kysely'
import { prepareQuery } from './statements.js'
import type { ApiKeyRow, ApiKeysTable, Database, UserRow } from './types.js'
import { USER_COLUMNS } from './users.js'

/** Alive now: not revoked (or its grace still runs), not expired. */
const live = (): Expression<SqlBool> =>
  sql<SqlBool>`(api_keys.revoked_at is null or api_keys.revoked_at > now()) and (api_keys.expires_at is null or api_keys.expires_at > now())`

/**
 * The live key with this hash and its user: the user's columns and the key's id, scopes and last
 * use, and when it stops living by the clock alone (the earlier of its expiry and its rotated
 * grace's end; null: not by the clock), for a process that keeps the row (accounts/holder-cache.ts).
 */
const liveKeyHolder = (db: QueryCreator<Database>, keyHash: string) =>
  db.selectFrom('api_keys')
    .innerJoin('users', 'users.id', 'api_keys.user_id')
    .select(USER_COLUMNS.map((column) => `users.${column}` as const))
    .select(['api_keys.id as key_id', 'api_keys.scopes as key_scopes', 'api_keys.last_used_at as key_last_used_at'])
    .select(sql<string | null>`least(api_keys.revoked_at, api_keys.expires_at)`.as('key_lives_until'))
    .where('api_keys.key_hash', '=', keyHash)
    .where(live())

// The user a key names, and the key's scopes, in one round trip, prepared once
// (db/engine/prepared.ts): the key's check on the routes whose statement does not read it.
export const userForApiKey = prepareQuery('user_for_api_key', (db, p: { keyHash: string }) => liveKeyHolder(db, p.keyHash))

/** A key a route's statement checks itself: its hash, and the user it was made for (a key never changes owner). */
export interface KeyAsk { keyHash: string, userId: string }

/** A row of keyHolder: the user's columns and the key's. */
export type KeyHolderRow = UserRow & { key_id: string, key_scopes: string, key_last_used_at: string | null, key_lives_until: string | null }

/** When a key's holder row stops holding by the clock alone (epoch ms; Infinity: not by the clock). */
export const keyLivesUntil = (row: KeyHolderRow): number => row.key_lives_until === null ? Infinity : Date.parse(row.key_lives_until)

/**
 * The key's holder as a route's statement reads it, its CTE `holder` (the API key's side of
 * `tokenInStatement`, plugins/app/authenticate.ts): a row only while the key lives and is the
 * user's. Revoked, expired, deleted with its account: no row, so the statement reads or writes
 * nothing, and the key is refused (401) as the hook's own query would refuse it.
 */
export const keyHolder = (db: QueryCreator<Database>, p: KeyAsk) => liveKeyHolder(db, p.keyHash).where('api_keys.user_id', '=', p.userId)

/** `lastUsedAt` and `lastUsedAddress`, at most once a minute whatever the instances racing to write them. */
export async function touchApiKey (db: Kysely<Database>, id: string, address: string | null): Promise<void> {
  await db.updateTable('api_keys')
    .set({ last_used_at: sql`now()`, last_used_address: address })
    .where('id', '=', id)
    .where((eb) => eb.or([eb('last_used_at', 'is', null), eb('last_used_at', '<', sql<string>`now() - interval '1 minute'`)]))
    .execute()
}

export type NewApiKey = Pick<ApiKeysTable, 'id' | 'user_id' | 'name' | 'prefix' | 'key_hash' | 'scopes'> & { expires_at: string | null }

export async function insertApiKey (db: Kysely<Database>, key: NewApiKey): Promise<ApiKeyRow> {
  return db.insertInto('api_keys').values(key).returningAll().executeTakeFirstOrThrow()
}

/** Keys that live and are not winding down after a rotation: what the cap of 20 counts. */
export async function countActiveApiKeys (db: Kysely<Database>, userId: string): Promise<number> {
  const row = await db.selectFrom('api_keys')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('user_id', '=', userId)
    .where('revoked_at', 'is', null)
    .where((eb) => eb.or([eb('expires_at', 'is', null), eb('expires_at', '>', sql<string>`now()`)]))
    .executeTakeFirstOrThrow()
  return Number(row.n)
}

/** The user's live keys (those in a rotation's grace included), newest first. */
export function listLiveApiKeys (db: Kysely<Database>, userId: string): Promise<ApiKeyRow[]> {
  return db.selectFrom('api_keys').selectAll().where('user_id', '=', userId).where(live()).orderBy('created_at', 'desc').orderBy('id').execute()
}

/**
 * Stops the user's key `id` `graceSeconds` from now. Its owner stops any live key, one in a
 * rotation's grace included; a rotation only a key not winding down already. Its row when it
 * was stopped; undefined when there was none to stop (another request stopped it first).
 */
export function revokeApiKey (
  db: Kysely<Database>, userId: string, id: string, reason: 'owner' | 'rotated', graceSeconds = 0
): Promise<ApiKeyRow | undefined> {
  return db.updateTable('api_keys')
    .set({ revoked_at: sql`now() + make_interval(secs => ${graceSeconds})`, revoked_reason: reason })
    .where('user_id', '=', userId)
    .where('id', '=', id)
    .where(reason === 'rotated' ? sql<SqlBool>`api_keys.revoked_at is null` : sql<SqlBool>`true`)
    .where(live())
    .returningAll()
    .executeTakeFirst()
}

/** Every live key of the user stops now (a password reset): their rows. */
export function revokeApiKeysOfUser (db: Kysely<Database>, userId: string, reason: 'password-reset'): Promise<ApiKeyRow[]> {
  return db.updateTable('api_keys')
    .set({ revoked_at: sql`now()`, revoked_reason: reason })
    .where('user_id', '=', userId)
    .where(live())
    .returningAll()
    .execute()
}

/** The live keys among these hashes stop now (found "in the wild"): their rows, whoever owns them. */
export function revokeApiKeysByHash (db: Kysely<Database>, keyHashes: readonly string[]): Promise<ApiKeyRow[]> {
  if (keyHashes.length === 0) return Promise.resolve([])
  return db.updateTable('api_keys')
    .set({ revoked_at: sql`now()`, revoked_reason: 'reported' })
    .where('key_hash', 'in', keyHashes)
    .where(live())
    .returningAll()
    .execute()
}

/** Rows past use for a day: revoked or expired more than 30 days ago (the list shows only live keys). */
export async function purgeDeadApiKeys (db: Kysely<Database>): Promise<number> {
  const result = await db.deleteFrom('api_keys')
    .where((eb) => eb.or([
      eb('revoked_at', '<', sql<string>`now() - interval '30 days'`),
      eb('expires_at', '<', sql<string>`now() - interval '30 days'`)
    ]))
    .executeTakeFirst()
  return Number(result.numDeletedRows)
}
