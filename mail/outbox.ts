// What queues each account email (an Outbox, bound to the transaction of the change that
// causes it, so the message exists exactly when the change does; mail/queue.ts hands it out
// and wakes the sender after the commit) and what turns a queued row into the message sent.
// A link's token is never stored, so nothing at rest is a usable link: the outbox row keeps
// a random nonce, the token is HMAC-SHA-256 of it under a key derived from AUTH_JWT_SECRET
// (32 bytes, base64url), computed again when the message is sent, and email_tokens keeps only
// the token's SHA-256. A copy of the database without the secret rebuilds no link.
import { createHash, createHmac, hkdfSync, randomBytes } from 'node:crypto'
import type { Kysely } from 'kysely'
import { queueEmail, queueTokenEmailIfAccount, type ClaimedEmail } from '../db/email-outbox.js'
import { findUserForEmailToken, insertEmailToken } from '../db/email-tokens.js'
import type { Database, EmailTokenPurpose } from '../db/types.js'
import {
  emailChangedEmail, passwordChangedEmail, passwordResetEmail, signInMethodEmail, tokenLink, verificationEmail, welcomeEmail, welcomeVerifiedEmail,
  type MailContext, type RenderedEmail
} from './messages.js'

export const RESET_TOKEN_TTL_MS = 60 * 60 * 1000
export const VERIFICATION_TOKEN_TTL_MS = 48 * 60 * 60 * 1000

/** What queueing and sending need: the message context and the key of the links' tokens. */
export interface OutboxContext extends MailContext {
  linkKey: Buffer
}

/** The key link tokens are derived with: apart from the JWT key, though from the same secret. */
export const linkKeyFrom = (secret: string): Buffer =>
  Buffer.from(hkdfSync('sha256', secret, 'task-app', 'email link tokens v1', 32))

export const hashToken = (token: string): string => createHash('sha256').update(token, 'utf8').digest('hex')

const tokenFor = (ctx: OutboxContext, nonce: string): string => createHmac('sha256', ctx.linkKey).update(nonce, 'utf8').digest('base64url')

// The messages that carry a link, by kind: what their token is for, and how they read.
const WITH_LINK = {
  welcome: { purpose: 'email_verification', page: 'verify-email', ttlMs: VERIFICATION_TOKEN_TTL_MS, render: welcomeEmail },
  email_verification: { purpose: 'email_verification', page: 'verify-email', ttlMs: VERIFICATION_TOKEN_TTL_MS, render: verificationEmail },
  password_reset: { purpose: 'password_reset', page: 'reset-password', ttlMs: RESET_TOKEN_TTL_MS, render: passwordResetEmail }
} satisfies Record<string, { purpose: EmailTokenPurpose, page: 'verify-email' | 'reset-password', ttlMs: number, render: (ctx: MailContext, url: string) => RenderedEmail }>
type LinkKind = keyof typeof WITH_LINK
const hasLink = (kind: string): kind is LinkKind => Object.hasOwn(WITH_LINK, kind)

/** A fresh link: the nonce to store, the hash of its token to store, and the subject. */
function newLink (ctx: OutboxContext, kind: LinkKind) {
  const nonce = randomBytes(32).toString('base64url')
  const token = tokenFor(ctx, nonce)
  // Rendered in full like at send time, so this costs the same whoever it is for (forgot).
  const { subject } = WITH_LINK[kind].render(ctx, tokenLink(ctx, WITH_LINK[kind].page, token))
  return { nonce, hash: hashToken(token), subject }
}

interface Recipient { id: string, email: string }

async function queueWithLink (tx: Kysely<Database>, ctx: OutboxContext, user: Recipient, kind: LinkKind): Promise<void> {
  const { nonce, hash, subject } = newLink(ctx, kind)
  const { purpose, ttlMs } = WITH_LINK[kind]
  await insertEmailToken(tx, { hash, userId: user.id, purpose, email: user.email, ttlMs })
  await queueEmail(tx, { userId: user.id, kind, recipient: user.email, subject, text: null, html: null, linkNonce: nonce })
}

const queueRendered = (tx: Kysely<Database>, user: { id: string }, recipient: string, email: RenderedEmail) =>
  queueEmail(tx, { userId: user.id, kind: email.kind, recipient, subject: email.subject, text: email.text, html: email.html, linkNonce: null })

/**
 * The account emails, queued on one database handle: a transaction (mail/queue.ts opens it)
 * or, for the one-statement "forgot", the database itself. Counts what it queued, so the
 * sender is woken only when there is something to send.
 */
export class Outbox {
  readonly #db: Kysely<Database>
  readonly #ctx: OutboxContext
  #queued = 0

  constructor (db: Kysely<Database>, ctx: OutboxContext) {
    this.#db = db
    this.#ctx = ctx
  }

  /** Messages queued through this outbox (a "forgot" counts, whether or not it found an account). */
  get queued (): number {
    return this.#queued
  }

  /** After registration: a welcome that carries the verification link. */
  async welcome (user: Recipient): Promise<void> {
    await queueWithLink(this.#db, this.#ctx, user, 'welcome')
    this.#queued++
  }

  async verification (user: Recipient): Promise<void> {
    await queueWithLink(this.#db, this.#ctx, user, 'email_verification')
    this.#queued++
  }

  /**
   * "Forgot password": a reset link to `email` if it is an account's address, else nothing,
   * with the same work either way (one statement after the same computation).
   */
  async passwordResetIfAccount (email: string): Promise<void> {
    const { nonce, hash, subject } = newLink(this.#ctx, 'password_reset')
    await queueTokenEmailIfAccount(this.#db, email,
      { hash, purpose: WITH_LINK.password_reset.purpose, ttlMs: WITH_LINK.password_reset.ttlMs },
      { kind: 'password_reset', subject, linkNonce: nonce })
    this.#queued++
  }

  async passwordChanged (user: Recipient): Promise<void> {
    await queueRendered(this.#db, user, user.email, passwordChangedEmail(this.#ctx))
    this.#queued++
  }

  /** After sign-up through a provider that verified the address: a welcome without a link. */
  async welcomeVerified (user: Recipient, provider: string): Promise<void> {
    await queueRendered(this.#db, user, user.email, welcomeVerifiedEmail(this.#ctx, provider))
    this.#queued++
  }

  /** A security notice: `what` (a provider's sign-in, later a second factor, a passkey, an API key) was added or removed. */
  async signInMethod (user: Recipient, change: 'added' | 'removed', what: string): Promise<void> {
    await queueRendered(this.#db, user, user.email, signInMethodEmail(this.#ctx, change, what))
    this.#queued++
  }

  /** To the old address: the account now uses `newEmail`. */
  async emailChanged (user: { id: string }, oldEmail: string, newEmail: string): Promise<void> {
    await queueRendered(this.#db, user, oldEmail, emailChangedEmail(this.#ctx, newEmail))
    this.#queued++
  }
}

export interface ComposedEmail {
  recipient: string
  subject: string
  text: string
  html: string
  /** The link it carries, for the development log. */
  link: string | null
}

/**
 * The message to send for a claimed row: its link rendered now, from its nonce. Undefined
 * when the link would not work (used, expired, superseded, or the secret changed since it
 * was queued): such a message is not worth sending.
 */
export async function composeForSending (db: Kysely<Database>, ctx: OutboxContext, email: ClaimedEmail): Promise<ComposedEmail | undefined> {
  if (email.linkNonce === null) {
    return { recipient: email.recipient, subject: email.subject, text: email.text ?? '', html: email.html ?? '', link: null }
  }
  if (!hasLink(email.kind)) return undefined
  const { purpose, page, render } = WITH_LINK[email.kind]
  const token = tokenFor(ctx, email.linkNonce)
  if (await findUserForEmailToken(db, hashToken(token), purpose) === undefined) return undefined
  const { subject, text, html, link } = render(ctx, tokenLink(ctx, page, token))
  return { recipient: email.recipient, subject, text, html, link }
}
