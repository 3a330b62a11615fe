// The email outbox: one row per message, written inside the caller's transaction (with the
// change that causes the message). The sender (mail/sender.ts) claims a due row with a lease
// (FOR UPDATE SKIP LOCKED, so concurrent senders never take the same row), sends outside any
// transaction, then records the outcome here.
import { sql, type Kysely, type SelectQueryBuilder } from 'kysely'
import type { Database, EmailTokenPurpose } from './types.js'

export interface OutgoingEmail {
  userId: string | null
  kind: string
  recipient: string
  subject: string
  /** The bodies; null for a message with a link, which is rendered when it is sent. */
  text: string | null
  html: string | null
  /** What the link's token is derived from when the message is sent (mail/outbox.ts). */
  linkNonce: string | null
  /**
   * A notice held back past its address's hourly cap: due this many ms from now, and then sent
   * in one digest with the others held for the same address (claimHeldWith).
   */
  digestInMs?: number
}

/** A queued message as the sender claims it. */
export interface ClaimedEmail extends Omit<OutgoingEmail, 'userId' | 'digestInMs'> {
  id: string
  attempts: number
  createdAt: string
  /** A held notice: sent with the others held for its address, as one digest. */
  digest: boolean
}

export async function queueEmail (db: Kysely<Database>, email: OutgoingEmail): Promise<void> {
  await db.insertInto('email_outbox').values({
    user_id: email.userId,
    kind: email.kind,
    recipient: email.recipient,
    subject: email.subject,
    text_body: email.text,
    html_body: email.html,
    link_nonce: email.linkNonce,
    ...(email.digestInMs !== undefined && {
      digest: true,
      next_attempt_at: sql<string>`now() + ${Math.max(0, Math.round(email.digestInMs))}::int * interval '1 millisecond'`
    })
  }).execute()
}

/**
 * One statement: when `email` is an account's address, a token for it and a message with
 * its link; otherwise nothing. The same statement either way, so its cost says nothing of
 * whether the address has an account, and the address is read as it is now (not as a
 * request read it earlier).
 */
export async function queueTokenEmailIfAccount (
  db: Kysely<Database>,
  email: string,
  token: { hash: string, purpose: EmailTokenPurpose, ttlMs: number },
  message: { kind: string, subject: string, linkNonce: string }
): Promise<void> {
  await db
    .with('recipient', (db) => db.selectFrom('users').select(['id', 'email']).where('email', '=', email))
    .with('token', (db) => db.insertInto('email_tokens')
      .columns(['token_hash', 'user_id', 'purpose', 'email', 'expires_at'])
      .expression((eb) => eb.selectFrom('recipient').select([
        sql<string>`${token.hash}`.as('token_hash'),
        'id',
        sql<EmailTokenPurpose>`${token.purpose}`.as('purpose'),
        'email',
        sql<string>`now() + ${token.ttlMs}::int * interval '1 millisecond'`.as('expires_at')
      ]))
      .returning(['user_id', 'email']))
    .insertInto('email_outbox')
    .columns(['user_id', 'kind', 'recipient', 'subject', 'link_nonce'])
    .expression((eb) => eb.selectFrom('token').select([
      'user_id',
      sql<string>`${message.kind}`.as('kind'),
      'email',
      sql<string>`${message.subject}`.as('subject'),
      sql<string>`${message.linkNonce}`.as('link_nonce')
    ]))
    .execute()
}

/**
 * Takes up to `limit` due messages for `leaseMs`: until the lease ends no other sender takes
 * them. A sender that dies mid-send leaves its rows to be taken again once the lease ends.
 */
export function claimDueEmails (db: Kysely<Database>, limit: number, leaseMs: number): Promise<ClaimedEmail[]> {
  return claim(db, leaseMs, limit, 0, (query) => query)
}

// Notices held in one hour share its end as their due time, give or take the milliseconds
// between their queueing: a digest takes along those due this soon after it.
const HELD_TOGETHER_MS = 5_000

/**
 * The other held notices for `recipient` due with a digest the sender claimed (`claimed`), taken
 * for `leaseMs` like it: sent in the same digest, oldest first.
 */
export function claimHeldWith (db: Kysely<Database>, claimed: ClaimedEmail, leaseMs: number): Promise<ClaimedEmail[]> {
  return claim(db, leaseMs, 100, HELD_TOGETHER_MS, (query) => query
    .where('recipient', '=', claimed.recipient)
    .where('digest', '=', true)
    .where('id', '<>', sql<string>`${claimed.id}::bigint`))
}

type Unclaimed = SelectQueryBuilder<Database, 'email_outbox', { id: string }>

/** Takes the rows waiting to be sent that `which` picks, due within `dueInMs`, oldest first, up to `limit`, under a lease of `leaseMs`. */
async function claim (db: Kysely<Database>, leaseMs: number, limit: number, dueInMs: number, which: (query: Unclaimed) => Unclaimed): Promise<ClaimedEmail[]> {
  const rows = await db.updateTable('email_outbox')
    .set({
      locked_until: sql`now() + ${leaseMs}::int * interval '1 millisecond'`,
      attempts: sql`attempts + 1`
    })
    .where('id', 'in', (eb) => which(eb.selectFrom('email_outbox').select('id'))
      .where('sent_at', 'is', null)
      .where('failed_at', 'is', null)
      .where('next_attempt_at', '<=', sql<string>`now() + ${dueInMs}::int * interval '1 millisecond'`)
      .where((w) => w.or([w('locked_until', 'is', null), w('locked_until', '<', sql<string>`now()`)]))
      .orderBy('id')
      .limit(limit)
      .forUpdate()
      .skipLocked())
    .returning([
      sql<string>`id::text`.as('id'), 'kind', 'recipient', 'subject', 'text_body', 'html_body', 'link_nonce', 'attempts', 'created_at', 'digest'
    ])
    .execute()
  return rows
    .map((row) => ({
      id: row.id,
      kind: row.kind,
      recipient: row.recipient,
      subject: row.subject,
      text: row.text_body,
      html: row.html_body,
      linkNonce: row.link_nonce,
      attempts: Number(row.attempts),
      createdAt: row.created_at,
      digest: row.digest
    }))
    .sort((a, b) => Number(a.id) - Number(b.id))
}

/** Delivered: the bodies and the nonce are blanked. */
export async function markEmailSent (db: Kysely<Database>, id: string): Promise<void> {
  await db.updateTable('email_outbox')
    .set({ sent_at: sql`now()`, locked_until: null, last_error: null, text_body: null, html_body: null, link_nonce: null })
    .where('id', '=', sql<string>`${id}::bigint`)
    .execute()
}

/** Failed for now: tried again after `delayMs`. */
export async function scheduleEmailRetry (db: Kysely<Database>, id: string, delayMs: number, error: string): Promise<void> {
  await db.updateTable('email_outbox')
    .set({ next_attempt_at: sql`now() + ${Math.round(delayMs)}::int * interval '1 millisecond'`, locked_until: null, last_error: error })
    .where('id', '=', sql<string>`${id}::bigint`)
    .execute()
}

/**
 * Given up: kept with its error for inspection, blanked like a sent one. `error` replaces the
 * last delivery error, or with `ifNoneBefore` only stands in for none.
 */
export async function markEmailFailed (db: Kysely<Database>, id: string, error: string, ifNoneBefore = false): Promise<void> {
  await db.updateTable('email_outbox')
    .set({ failed_at: sql`now()`, locked_until: null, last_error: ifNoneBefore ? sql<string>`coalesce(last_error, ${error})` : error, text_body: null, html_body: null, link_nonce: null })
    .where('id', '=', sql<string>`${id}::bigint`)
    .execute()
}

/** Messages waiting to be sent (not yet sent nor given up): the outbox's depth, from its partial index. */
export async function countPendingEmails (db: Kysely<Database>): Promise<number> {
  const { count } = await db.selectFrom('email_outbox')
    .select(sql<number>`count(*)::int`.as('count'))
    .where('sent_at', 'is', null)
    .where('failed_at', 'is', null)
    .executeTakeFirstOrThrow()
  return count
}

/**
 * Milliseconds until the next waiting message may be taken (its retry time, or the end of
 * another sender's lease on it, a dead one's included); undefined when none waits.
 */
export async function msUntilNextEmailDue (db: Kysely<Database>): Promise<number | undefined> {
  const { ms } = await db.selectFrom('email_outbox')
    .select(sql<number | null>`(extract(epoch from min(greatest(next_attempt_at, coalesce(locked_until, next_attempt_at))) - now()) * 1000)::float8`.as('ms'))
    .where('sent_at', 'is', null)
    .where('failed_at', 'is', null)
    .executeTakeFirstOrThrow()
  return ms === null ? undefined : Math.max(0, Number(ms))
}

/** Housekeeping: sent messages after a week; given-up ones stay a month, for inspection. */
export async function purgeOldEmails (db: Kysely<Database>): Promise<void> {
  await db.deleteFrom('email_outbox').where('sent_at', '<', sql<string>`now() - interval '7 days'`).execute()
  await db.deleteFrom('email_outbox').where('failed_at', '<', sql<string>`now() - interval '30 days'`).execute()
}
