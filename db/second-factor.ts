// A second factor's rows (docs/second-factor.md): the TOTP factor, its recovery codes, and
// the challenges of sign-ins waiting for it. Each check that must hold once (a time step, a
// recovery code, a challenge) is one statement whose WHERE is the check, so of two racing
// requests, on any instances, exactly one changes the row.
import { sql, type Insertable, type Kysely } from 'kysely'
import type { Database, MfaChallengeRow, MfaChallengesTable, TotpFactorRow } from './types.js'

/** The user's factor, with how many seconds its checks stay suspended (0: not suspended), by the database's clock. */
export function findTotpFactor (db: Kysely<Database>, userId: string): Promise<(TotpFactorRow & { suspended_for: number }) | undefined> {
  return db.selectFrom('totp_factors')
    .selectAll()
    .select(sql<number>`greatest(0, coalesce(ceil(extract(epoch from suspended_until - now())), 0))::int`.as('suspended_for'))
    .where('user_id', '=', userId)
    .executeTakeFirst()
}

/** Whether the user has a confirmed TOTP factor. */
export async function hasTotp (db: Kysely<Database>, userId: string): Promise<boolean> {
  const row = await db.selectFrom('totp_factors').select('user_id').where('user_id', '=', userId).where('confirmed_at', 'is not', null).executeTakeFirst()
  return row !== undefined
}

/** Whether any user has a confirmed TOTP factor (start-up: is MFA_ENCRYPTION_KEY needed?). */
export async function anyTotp (db: Kysely<Database>): Promise<boolean> {
  const row = await db.selectFrom('totp_factors').select('user_id').where('confirmed_at', 'is not', null).limit(1).executeTakeFirst()
  return row !== undefined
}

/** A pending enrolment with this sealed seed, replacing a pending one; false when the user has a confirmed factor. */
export async function savePendingTotp (db: Kysely<Database>, userId: string, sealed: string): Promise<boolean> {
  const row = await db.insertInto('totp_factors')
    .values({ user_id: userId, secret: sealed })
    .onConflict((oc) => oc.column('user_id')
      .doUpdateSet({ secret: sealed, last_step: null, created_at: sql`now()` })
      .where('totp_factors.confirmed_at', 'is', null))
    .returning('user_id')
    .executeTakeFirst()
  return row !== undefined
}

/** Confirms the pending factor with the step of its first code (which therefore cannot be used again); false when it is not pending. */
export async function confirmTotp (db: Kysely<Database>, userId: string, step: number): Promise<boolean> {
  const result = await db.updateTable('totp_factors')
    .set({ confirmed_at: sql`now()`, last_step: step, failures: 0, suspended_until: null })
    .where('user_id', '=', userId)
    .where('confirmed_at', 'is', null)
    .executeTakeFirst()
  return result.numUpdatedRows > 0n
}

/**
 * Accepts a code of `step`: the last accepted step moves forward to it, the failures count
 * from zero again, and a suspension its own try made is lifted. False when a code of this step or a later one was accepted already (a replay).
 */
export async function advanceTotpStep (db: Kysely<Database>, userId: string, step: number): Promise<boolean> {
  const result = await db.updateTable('totp_factors')
    .set({ last_step: step, failures: 0, suspended_until: null })
    .where('user_id', '=', userId)
    .where('confirmed_at', 'is not', null)
    .where((eb) => eb.or([eb('last_step', 'is', null), eb('last_step', '<', step)]))
    .executeTakeFirst()
  return result.numUpdatedRows > 0n
}

export async function resealTotp (db: Kysely<Database>, userId: string, sealed: string): Promise<void> {
  await db.updateTable('totp_factors').set({ secret: sealed }).where('user_id', '=', userId).execute()
}

/**
 * The failures count from zero again, and a suspension the accepted answer's own try made is
 * lifted (a recovery code or a passkey was accepted).
 */
export async function clearSecondFactorFailures (db: Kysely<Database>, userId: string): Promise<void> {
  await db.updateTable('totp_factors').set({ failures: 0, suspended_until: null })
    .where('user_id', '=', userId).where((eb) => eb.or([eb('failures', '>', 0), eb('suspended_until', 'is not', null)])).execute()
}

/**
 * Takes one try of the user's confirmed factor before an answer is checked, in one statement,
 * so answers racing on any instances each see the others': the failures count one more at
 * once, and the try that makes them `limit` suspends the checks for `suspendSeconds` (the count
 * then starts again). Its answer is still checked: a right one lifts the suspension where it is
 * accepted, one that was no guess gives the try back (releaseSecondFactorTry). The factor, with
 * `suspends` true for the try that suspended; undefined when there is no confirmed factor or
 * its checks are suspended.
 */
export async function takeSecondFactorTry (db: Kysely<Database>, userId: string, limit: number, suspendSeconds: number): Promise<(TotpFactorRow & { suspends: boolean }) | undefined> {
  const reaches = sql<boolean>`failures + 1 >= ${limit}`
  const row = await db.updateTable('totp_factors')
    .set({
      failures: sql`case when ${reaches} then 0 else failures + 1 end`,
      suspended_until: sql`case when ${reaches} then now() + make_interval(secs => ${suspendSeconds}) else null end`
    })
    .where('user_id', '=', userId)
    .where('confirmed_at', 'is not', null)
    .where((eb) => eb.or([eb('suspended_until', 'is', null), eb('suspended_until', '<=', sql<string>`now()`)]))
    .returningAll()
    .executeTakeFirst()
  // A count of 0 after one more: this try reached the limit.
  return row === undefined ? undefined : { ...row, suspends: row.failures === 0 }
}

/**
 * Gives back a try that was no guess (a replay, a lost race, a failure of ours): one failure
 * fewer, or, for the try that suspended the checks (`suspended`), the suspension lifted and the
 * count where that try found it.
 */
export async function releaseSecondFactorTry (db: Kysely<Database>, userId: string, suspended: boolean, limit: number): Promise<void> {
  const release = db.updateTable('totp_factors').where('user_id', '=', userId)
  await (suspended
    // Unless a right answer lifted the suspension meanwhile (its count is 0 then, and stays).
    ? release.set({ failures: limit - 1, suspended_until: null }).where('failures', '=', 0).where('suspended_until', 'is not', null)
    : release.set({ failures: sql`failures - 1` }).where('failures', '>', 0)
  ).execute()
}

/** Turns the second factor off: the factor, its recovery codes and the challenges waiting for it. */
export async function deleteSecondFactor (db: Kysely<Database>, userId: string): Promise<boolean> {
  const result = await db.deleteFrom('totp_factors').where('user_id', '=', userId).where('confirmed_at', 'is not', null).executeTakeFirst()
  await db.deleteFrom('recovery_codes').where('user_id', '=', userId).execute()
  await voidChallenges(db, userId)
  return result.numDeletedRows > 0n
}

/** The user's recovery codes become these (hashes); the old ones are void. */
export async function replaceRecoveryCodes (db: Kysely<Database>, userId: string, hashes: string[]): Promise<void> {
  await db.deleteFrom('recovery_codes').where('user_id', '=', userId).execute()
  await db.insertInto('recovery_codes').values(hashes.map((hash) => ({ user_id: userId, code_hash: hash }))).execute()
}

/** Uses the recovery code with this hash; false when the user has no such unused code. */
export async function useRecoveryCode (db: Kysely<Database>, userId: string, hash: string): Promise<boolean> {
  const result = await db.updateTable('recovery_codes')
    .set({ used_at: sql`now()` })
    .where('user_id', '=', userId)
    .where('code_hash', '=', hash)
    .where('used_at', 'is', null)
    .executeTakeFirst()
  return result.numUpdatedRows > 0n
}

export async function recoveryCodesLeft (db: Kysely<Database>, userId: string): Promise<number> {
  const row = await db.selectFrom('recovery_codes').select((eb) => eb.fn.countAll<number>().as('left'))
    .where('user_id', '=', userId).where('used_at', 'is', null).executeTakeFirstOrThrow()
  return Number(row.left)
}

export async function createChallenge (db: Kysely<Database>, challenge: Insertable<MfaChallengesTable>): Promise<void> {
  await db.insertInto('mfa_challenges').values(challenge).execute()
}

/**
 * Takes one try of the challenge with this hash: the challenge, its tries left after this one,
 * unless it is unknown, used, expired or out of tries.
 */
export function takeChallengeTry (db: Kysely<Database>, tokenHash: string): Promise<MfaChallengeRow | undefined> {
  return db.updateTable('mfa_challenges')
    .set({ tries_left: sql`tries_left - 1` })
    .where('token_hash', '=', tokenHash)
    .where('used_at', 'is', null)
    .where('tries_left', '>', 0)
    .where('expires_at', '>', sql<string>`now()`)
    .returningAll()
    .executeTakeFirst()
}

/** The live challenge with this hash (no try taken), unless it is unknown, used, expired or out of tries. */
export function findLiveChallenge (db: Kysely<Database>, tokenHash: string): Promise<MfaChallengeRow | undefined> {
  return db.selectFrom('mfa_challenges').selectAll()
    .where('token_hash', '=', tokenHash)
    .where('used_at', 'is', null)
    .where('tries_left', '>', 0)
    .where('expires_at', '>', sql<string>`now()`)
    .executeTakeFirst()
}

/** Marks the challenge used; false when another request used it first. */
export async function useChallenge (db: Kysely<Database>, tokenHash: string): Promise<boolean> {
  const result = await db.updateTable('mfa_challenges').set({ used_at: sql`now()` })
    .where('token_hash', '=', tokenHash).where('used_at', 'is', null).executeTakeFirst()
  return result.numUpdatedRows > 0n
}

/** Every challenge of the user waiting for its second factor is void. */
export async function voidChallenges (db: Kysely<Database>, userId: string): Promise<void> {
  await db.deleteFrom('mfa_challenges').where('user_id', '=', userId).execute()
}

/** Challenges expired an hour ago: a job of plugins/app/second-factor.ts. */
export async function purgeExpiredChallenges (db: Kysely<Database>): Promise<number> {
  const result = await db.deleteFrom('mfa_challenges').where('expires_at', '<', sql<string>`now() - interval '1 hour'`).executeTakeFirst()
  return Number(result.numDeletedRows)
}
