// What queues each account email: called inside the transaction of the change that causes
// it, so the message exists exactly when the change does. Links carry a fresh one-time
// token (32 random bytes, base64url); only its SHA-256 is stored.
import { createHash, randomBytes } from 'node:crypto'
import type { Kysely } from 'kysely'
import { insertEmailToken, queueEmail } from '../db/email.js'
import type { Database, EmailTokenPurpose } from '../db/types.js'
import {
  emailChangedEmail, passwordChangedEmail, passwordResetEmail, tokenLink, verificationEmail, welcomeEmail,
  type MailContext, type RenderedEmail
} from './messages.js'

export const RESET_TOKEN_TTL_MS = 60 * 60 * 1000
export const VERIFICATION_TOKEN_TTL_MS = 48 * 60 * 60 * 1000

export const hashToken = (token: string): string => createHash('sha256').update(token, 'utf8').digest('hex')

interface Recipient { id: string, email: string }

async function issueToken (tx: Kysely<Database>, user: Recipient, purpose: EmailTokenPurpose, ttlMs: number): Promise<string> {
  const token = randomBytes(32).toString('base64url')
  await insertEmailToken(tx, { hash: hashToken(token), userId: user.id, purpose, email: user.email, ttlMs })
  return token
}

const queue = (tx: Kysely<Database>, user: { id: string }, recipient: string, email: RenderedEmail) =>
  queueEmail(tx, { userId: user.id, recipient, ...email })

/** After registration: a welcome that carries the verification link. */
export async function queueWelcome (tx: Kysely<Database>, ctx: MailContext, user: Recipient): Promise<void> {
  const token = await issueToken(tx, user, 'email_verification', VERIFICATION_TOKEN_TTL_MS)
  await queue(tx, user, user.email, welcomeEmail(ctx, tokenLink(ctx, 'verify-email', token)))
}

export async function queueVerification (tx: Kysely<Database>, ctx: MailContext, user: Recipient): Promise<void> {
  const token = await issueToken(tx, user, 'email_verification', VERIFICATION_TOKEN_TTL_MS)
  await queue(tx, user, user.email, verificationEmail(ctx, tokenLink(ctx, 'verify-email', token)))
}

export async function queuePasswordReset (tx: Kysely<Database>, ctx: MailContext, user: Recipient): Promise<void> {
  const token = await issueToken(tx, user, 'password_reset', RESET_TOKEN_TTL_MS)
  await queue(tx, user, user.email, passwordResetEmail(ctx, tokenLink(ctx, 'reset-password', token)))
}

export const queuePasswordChanged = (tx: Kysely<Database>, ctx: MailContext, user: Recipient): Promise<void> =>
  queue(tx, user, user.email, passwordChangedEmail(ctx))

/** To the old address: the account now uses `newEmail`. */
export const queueEmailChanged = (tx: Kysely<Database>, ctx: MailContext, user: { id: string }, oldEmail: string, newEmail: string): Promise<void> =>
  queue(tx, user, oldEmail, emailChangedEmail(ctx, newEmail))
