// The Idempotency-Key records (plugins/app/idempotency.ts decides what they mean): per user
// and key, the fingerprint of the request that first used the key and, once it succeeded,
// its answer. A record lives KEY_LIFETIME_HOURS; an older one counts as absent and is
// replaced in place, and the purge deletes it (and a user's oldest beyond the bound). A
// record without an answer is "running" while its lease lasts and "free" after (its request
// failed, or its instance died).
import { sql, type ExpressionBuilder, type Kysely, type SqlBool } from 'kysely'
import { prepareQuery } from './statements.js'
import type { Database } from './types.js'

/** How long a key's answer is kept (Stripe's 24 hours). */
const KEY_LIFETIME_HOURS = 24

const LIFETIME = sql.raw(`interval '${KEY_LIFETIME_HOURS} hours'`)

export interface IdempotencyRecord {
  requestHash: string
  /** The answer of the request that first used the key; null until it succeeds. */
  answer: { status: number, body: string } | null
  /** A request holds the key under a lease that has not ended. */
  running: boolean
  createdAt: string
}

type Keys = ExpressionBuilder<Database, 'idempotency_keys'>

const isLive = (eb: Keys) => eb('idempotency_keys.created_at', '>', sql<string>`now() - ${LIFETIME}`)
// Never null (a null lease is not running), so that its negation holds for free records too.
const isRunning = (eb: Keys) => eb.and([
  eb('idempotency_keys.response_status', 'is', null),
  eb('idempotency_keys.locked_until', 'is not', null),
  eb('idempotency_keys.locked_until', '>', sql<string>`now()`)
])
/** A record a new first request may take over: expired, or without an answer and not running. */
const isReplaceable = (eb: Keys) => eb.or([
  eb.not(isLive(eb)),
  eb.and([
    eb('idempotency_keys.response_status', 'is', null),
    eb.or([eb('idempotency_keys.locked_until', 'is', null), eb('idempotency_keys.locked_until', '<=', sql<string>`now()`)])
  ])
])

const RECORD_COLUMNS = ['request_hash', 'response_status', 'response_body', 'created_at'] as const

interface RecordRow {
  request_hash: string | null
  response_status: number | null
  response_body: string | null
  running: SqlBool | null
  created_at: string | null
}

const toRecord = (row: RecordRow): IdempotencyRecord | undefined => row.request_hash === null
  ? undefined
  : {
      requestHash: row.request_hash,
      answer: row.response_status === null ? null : { status: row.response_status, body: row.response_body ?? '' },
      running: row.running === true || row.running === 1,
      createdAt: row.created_at!
    }

/** The user's live record of `key`, if any. */
export async function findIdempotencyRecord (db: Kysely<Database>, userId: string, key: string): Promise<IdempotencyRecord | undefined> {
  const row = await db.selectFrom('idempotency_keys')
    .select(RECORD_COLUMNS)
    .select((eb) => isRunning(eb).as('running'))
    .where('user_id', '=', userId).where('key', '=', key)
    .where(isLive)
    .executeTakeFirst()
  return row && toRecord(row)
}

// Keyed POST /tasks runs these two in its transaction: prepared, as its own statement is.
const lockStatement = prepareQuery('idempotency_lock', (db, p: { userId: string, key: string }) => db
  .selectFrom(sql<{ locked: boolean }>`(select pg_try_advisory_xact_lock(hashtextextended('idempotency-key:' || ${p.userId} || ':' || ${p.key}, 0)) as locked)`.as('l'))
  .leftJoinLateral(
    (eb) => eb.selectFrom('idempotency_keys')
      .select(RECORD_COLUMNS)
      .select((eb) => isRunning(eb).as('running'))
      .where('user_id', '=', p.userId).where('key', '=', p.key)
      .where(isLive)
      .as('k'),
    (join) => join.onTrue())
  .select(['l.locked', 'k.request_hash', 'k.response_status', 'k.response_body', 'k.running', 'k.created_at']))

/**
 * In a transaction: takes the key's lock until the transaction ends, unless another one
 * holds it (`locked: false`), and reads the key's live record. A transaction-scoped advisory
 * lock, so a crash that ends the transaction also frees the key. The record is read in the
 * same statement, so one committed just before the lock was taken may be missed:
 * storeIdempotentAnswer then finds it and refuses.
 */
export async function lockIdempotencyKey (tx: Kysely<Database>, userId: string, key: string): Promise<{ locked: boolean, record: IdempotencyRecord | undefined }> {
  const [row] = await lockStatement.run(tx, { userId, key })
  return { locked: row!.locked, record: toRecord(row!) }
}

export interface StoredAnswer {
  userId: string
  key: string
  requestHash: string
  status: number
  body: string
}

const storeStatement = prepareQuery('idempotency_store', (db, p: StoredAnswer) => db
  .insertInto('idempotency_keys')
  .values({ user_id: p.userId, key: p.key, request_hash: p.requestHash, response_status: p.status, response_body: p.body })
  .onConflict((oc) => oc.columns(['user_id', 'key'])
    .doUpdateSet({
      request_hash: p.requestHash,
      response_status: p.status,
      response_body: p.body,
      locked_until: sql<null>`null`,
      lease_token: sql<null>`null`,
      created_at: sql`now()`
    })
    .where(isReplaceable))
  .returning('key'))

/**
 * In the transaction that did the request's work: stores its answer, replacing an expired or
 * free record. False when a live record was committed meanwhile: the caller must roll back.
 */
export async function storeIdempotentAnswer (tx: Kysely<Database>, answer: StoredAnswer): Promise<boolean> {
  return (await storeStatement.run(tx, answer)).length > 0
}

export interface Claim {
  userId: string
  key: string
  requestHash: string
  /** Identifies this attempt: only it may complete or release the record. */
  token: string
  leaseMs: number
}

/**
 * Holds the key for a request that runs outside a transaction, for `leaseMs`: a new record,
 * or an expired or free one taken over. Undefined when the key's live record is running or
 * answered (read it with findIdempotencyRecord). A free record taken over by the same request
 * keeps its creation time, which the caller derives the provider's keys from.
 */
export async function claimIdempotencyKey (db: Kysely<Database>, claim: Claim): Promise<{ createdAt: string } | undefined> {
  const { userId, key, requestHash, token, leaseMs } = claim
  const lockedUntil = sql<string>`now() + ${leaseMs}::int * interval '1 millisecond'`
  return db.insertInto('idempotency_keys')
    .values({ user_id: userId, key, request_hash: requestHash, locked_until: lockedUntil, lease_token: token })
    .onConflict((oc) => oc.columns(['user_id', 'key'])
      .doUpdateSet((eb) => ({
        request_hash: requestHash,
        response_status: null,
        response_body: null,
        locked_until: lockedUntil,
        lease_token: token,
        created_at: eb.case()
          .when(eb.and([isLive(eb), eb('idempotency_keys.request_hash', '=', requestHash)]))
          .then(eb.ref('idempotency_keys.created_at'))
          .else(sql<string>`now()`)
          .end()
      }))
      .where(isReplaceable))
    .returning('created_at as createdAt')
    .executeTakeFirst()
}

/** Stores the answer of the attempt holding the key. False when it no longer holds it (its lease ended and another took over). */
export async function completeIdempotencyKey (db: Kysely<Database>, held: { userId: string, key: string, token: string, status: number, body: string }): Promise<boolean> {
  const result = await db.updateTable('idempotency_keys')
    .set({ response_status: held.status, response_body: held.body, locked_until: null, lease_token: null })
    .where('user_id', '=', held.userId).where('key', '=', held.key).where('lease_token', '=', held.token)
    .executeTakeFirst()
  return result.numUpdatedRows > 0n
}

/** The attempt holding the key failed: the key is free again (for a retry, with any body). */
export async function releaseIdempotencyKey (db: Kysely<Database>, held: { userId: string, key: string, token: string }): Promise<void> {
  await db.updateTable('idempotency_keys')
    .set({ locked_until: null, lease_token: null })
    .where('user_id', '=', held.userId).where('key', '=', held.key).where('lease_token', '=', held.token)
    .where('response_status', 'is', null)
    .execute()
}

/**
 * Housekeeping: deletes the records past their lifetime, and each user's beyond the newest
 * `maxPerUser`, except those a request holds. Kept off the request path, where counting a
 * user's records on every keyed write slowed it as they piled up.
 */
export async function purgeIdempotencyKeys (db: Kysely<Database>, maxPerUser: number): Promise<{ expired: number, evicted: number }> {
  const expired = await db.deleteFrom('idempotency_keys')
    .where((eb) => eb.not(isLive(eb)))
    .where((eb) => eb.not(isRunning(eb)))
    .executeTakeFirst()
  // Newest first over all of a user's records; only users over the bound are ranked.
  const ranked = db.selectFrom('idempotency_keys')
    .select(['user_id', 'key', (eb) => eb.fn.agg<number>('row_number').over((ob) => ob.partitionBy('user_id').orderBy('created_at', 'desc')).as('n')])
    .where('user_id', 'in', (eb) => eb.selectFrom('idempotency_keys').select('user_id')
      .groupBy('user_id')
      .having((eb) => eb.fn.countAll(), '>', maxPerUser))
    .as('ranked')
  const evicted = await db.deleteFrom('idempotency_keys')
    .using(ranked)
    .whereRef('idempotency_keys.user_id', '=', 'ranked.user_id')
    .whereRef('idempotency_keys.key', '=', 'ranked.key')
    .where('ranked.n', '>', maxPerUser)
    .where((eb) => eb.not(isRunning(eb)))
    .executeTakeFirst()
  return { expired: Number(expired.numDeletedRows), evicted: Number(evicted.numDeletedRows) }
}
