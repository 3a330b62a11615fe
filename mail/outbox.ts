// What queues each account email (an Outbox, bound to the transaction of the change that
// causes it, so the message exists exactly when the change does; mail/queue.ts hands it out
// and wakes the sender after the commit) and what turns a queued row into the message sent.
// A link's token is never stored, so nothing at rest is a usable link: the outbox row keeps
// a random nonce, the token is HMAC-SHA-256 of it under a key derived from AUTH_JWT_SECRET
// (32 bytes, base64url), computed again when the message is sent, and email_tokens keeps only
// the token's SHA-256. A copy of the database without the secret rebuilds no link.
import { createHmac, hkdfSync, randomBytes } from 'node:crypto'
import type { Kysely } from 'kysely'
import { queueEmail, queueTokenEmailIfAccount, type ClaimedEmail } from '../db/email-outbox.js'
import { findUserForEmailToken, insertEmailToken } from '../db/email-tokens.js'
import { linkedProviders } from '../db/identities.js'
import type { Database, EmailTokenPurpose } from '../db/types.js'
import {
  apiKeyEmail, deviceLinkEmail, emailChangedEmail, emailChangeRequestedEmail, passwordChangedEmail, passwordResetEmail, secondFactorEmail, securityDigestEmail, signInMethodEmail, tokenLink,
  verificationEmail, welcomeEmail, welcomeVerifiedEmail, type MailContext, type RenderedEmail, type SecondFactorEvent, type ApiKeyEvent
} from './messages.js'
import { hashToken } from '../token-hash.js'

export const RESET_TOKEN_TTL_MS = 60 * 60 * 1000
export const VERIFICATION_TOKEN_TTL_MS = 48 * 60 * 60 * 1000
export const DEVICE_LINK_TTL_MS = 60 * 60 * 1000

/** What queueing and sending need: the message context and the key of the links' tokens. */
export interface OutboxContext extends MailContext {
  linkKey: Buffer
}

/** The key link tokens are derived with: apart from the JWT key, though from the same secret. */
export const linkKeyFrom = (secret: string): Buffer =>
  Buffer.from(hkdfSync('sha256', secret, 'task-app', 'email link tokens v1', 32))

const tokenFor = (ctx: OutboxContext, nonce: string): string => createHmac('sha256', ctx.linkKey).update(nonce, 'utf8').digest('base64url')

// The messages that carry a link, by kind: what their token is for, and how they read.
const WITH_LINK = {
  welcome: { purpose: 'email_verification', page: 'verify-email', ttlMs: VERIFICATION_TOKEN_TTL_MS, render: welcomeEmail },
  email_verification: { purpose: 'email_verification', page: 'verify-email', ttlMs: VERIFICATION_TOKEN_TTL_MS, render: verificationEmail },
  password_reset: { purpose: 'password_reset', page: 'reset-password', ttlMs: RESET_TOKEN_TTL_MS, render: passwordResetEmail },
  device_link: { purpose: 'device_link', page: 'trust-device', ttlMs: DEVICE_LINK_TTL_MS, render: deviceLinkEmail }
} satisfies Record<string, {
  purpose: EmailTokenPurpose
  page: 'verify-email' | 'reset-password' | 'trust-device'
  ttlMs: number
  /** `providers`: for a reset, the identity providers it keeps (read when the message is sent). */
  render: (ctx: MailContext, url: string, providers?: string[]) => RenderedEmail
}>
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

/** `heldForMs`: past the inbox's cap, a notice held this long, then sent in a digest with the others held for `recipient`. */
const queueRendered = (tx: Kysely<Database>, user: { id: string }, recipient: string, email: RenderedEmail, heldForMs?: number) =>
  queueEmail(tx, {
    userId: user.id, kind: email.kind, recipient, subject: email.subject, text: email.text, html: email.html, linkNonce: null, ...(heldForMs !== undefined && { digestInMs: heldForMs })
  })

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
    await this.#linkIfAccount(email, 'password_reset')
  }

  /** The link that lets a device past its account's sign-in lock, if `email` is an account's: like passwordResetIfAccount. */
  async deviceLinkIfAccount (email: string): Promise<void> {
    await this.#linkIfAccount(email, 'device_link')
  }

  async #linkIfAccount (email: string, kind: 'password_reset' | 'device_link'): Promise<void> {
    const { nonce, hash, subject } = newLink(this.#ctx, kind)
    await queueTokenEmailIfAccount(this.#db, email, { hash, purpose: WITH_LINK[kind].purpose, ttlMs: WITH_LINK[kind].ttlMs }, { kind, subject, linkNonce: nonce })
    this.#queued++
  }

  /** `providers`: ids of the identity providers still linked, named in it. The notices below take `heldForMs` (queueRendered). */
  async passwordChanged (user: Recipient, providers: string[] = [], heldForMs?: number): Promise<void> {
    await queueRendered(this.#db, user, user.email, passwordChangedEmail(this.#ctx, providers), heldForMs)
    this.#queued++
  }

  /** After sign-up through a provider that verified the address: a welcome without a link. */
  async welcomeVerified (user: Recipient, provider: string, heldForMs?: number): Promise<void> {
    await queueRendered(this.#db, user, user.email, welcomeVerifiedEmail(this.#ctx, provider), heldForMs)
    this.#queued++
  }

  /** A security notice: `what` (a provider's sign-in, later a second factor, a passkey, an API key) was added or removed. */
  async signInMethod (user: Recipient, change: 'added' | 'removed', what: string, heldForMs?: number): Promise<void> {
    await queueRendered(this.#db, user, user.email, signInMethodEmail(this.#ctx, change, what), heldForMs)
    this.#queued++
  }

  /** A security notice of the second factor: new recovery codes, one used (and how many are left), its checks suspended. */
  async secondFactor (user: Recipient, event: SecondFactorEvent, recoveryCodesLeft?: number, heldForMs?: number): Promise<void> {
    await queueRendered(this.#db, user, user.email, secondFactorEmail(this.#ctx, event, recoveryCodesLeft), heldForMs)
    this.#queued++
  }

  /** A security notice about an API key (made, rotated, revoked, reported; revoked by a reset: `count`). */
  async apiKey (user: Recipient, event: ApiKeyEvent, key: { name: string, prefix: string }, count?: number, heldForMs?: number): Promise<void> {
    await queueRendered(this.#db, user, user.email, apiKeyEmail(this.#ctx, event, key, count), heldForMs)
    this.#queued++
  }

  /** To the old address, once `newEmail` confirmed the change; `removed`: providers unlinked by it. */
  async emailChanged (user: { id: string }, oldEmail: string, newEmail: string, removed: string[] = [], heldForMs?: number): Promise<void> {
    await queueRendered(this.#db, user, oldEmail, emailChangedEmail(this.#ctx, newEmail, removed), heldForMs)
    this.#queued++
  }

  /** To the account's address: a change to `newEmail` waits for that address to confirm it. */
  async emailChangeRequested (user: Recipient, newEmail: string, heldForMs?: number): Promise<void> {
    await queueRendered(this.#db, user, user.email, emailChangeRequestedEmail(this.#ctx, newEmail), heldForMs)
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
 * was queued): such a message is not worth sending. Held notices (`digest`) claimed together
 * for one address are sent as one digest.
 */
export async function composeForSending (db: Kysely<Database>, ctx: OutboxContext, email: ClaimedEmail, heldWithIt: ClaimedEmail[] = []): Promise<ComposedEmail | undefined> {
  if (email.digest) {
    const notices = [email, ...heldWithIt].map((held) => ({ subject: held.subject, text: held.text ?? '' }))
    const { subject, text, html } = securityDigestEmail(ctx, notices)
    return { recipient: email.recipient, subject, text, html, link: null }
  }
  if (email.linkNonce === null) {
    return { recipient: email.recipient, subject: email.subject, text: email.text ?? '', html: email.html ?? '', link: null }
  }
  if (!hasLink(email.kind)) return undefined
  const { purpose, page, render } = WITH_LINK[email.kind]
  const token = tokenFor(ctx, email.linkNonce)
  const user = await findUserForEmailToken(db, hashToken(token), purpose)
  if (user === undefined) return undefined
  // A reset names the ways in it keeps, read now: an owner sees one that is not theirs.
  const providers = purpose === 'password_reset' ? await linkedProviders(db, user.id, true) : undefined
  const { subject, text, html, link } = render(ctx, tokenLink(ctx, page, token), providers)
  return { recipient: email.recipient, subject, text, html, link }
}
