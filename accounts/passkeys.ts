// Passkeys (WebAuthn; auth-extensions §4, docs/passkeys.md), through @simplewebauthn/server.
// - Every ceremony starts with options whose challenge is kept (its hash) in the database for
//   one purpose (registration, sign-in, second-factor, step-up), bound to the user, session or
//   `mfaToken` it was made for, 5 minutes, and used once by compare-and-set: any instance can
//   finish a ceremony another began, and an answer replayed finds its challenge used.
// - The relying party is APP_URL's host; the only origin accepted is APP_URL's.
// - A passkey signs in alone only with user verification (UV: a PIN or a biometric), and then
//   is both factors; with presence only it is a second factor or a step-up, never a sign-in.
// - Counter policy: a device-bound passkey (not backup-eligible) must answer with a counter
//   greater than the stored one, unless both are 0 (an authenticator without a counter); a
//   counter that does not grow is a cloned authenticator: refused, and a security event. Synced
//   passkeys report 0, or counters that no single device keeps: accepted. The stored counter
//   moves by compare-and-set, in the caller's transaction; a lost race is a refusal.
// No Fastify here: the client comes in as plain facts.
import { createHmac, getRandomValues, randomBytes, randomUUID } from 'node:crypto'
import type {
  AuthenticationResponseJSON, PublicKeyCredentialCreationOptionsJSON, PublicKeyCredentialRequestOptionsJSON, RegistrationResponseJSON,
  verifyAuthenticationResponse
} from '@simplewebauthn/server'
import type { Kysely } from 'kysely'
import type { Client } from '../client-address.js'
import { lockUserSignInMethods } from '../db/identities.js'
import {
  advancePasskeyCounter, countPasskeys, createWebAuthnChallenge, deletePasskey, findPasskeyByCredential, findUserHandle, insertPasskey, listPasskeys,
  lockUserPasskeys, MAX_PASSKEYS, renamePasskey, takeWebAuthnChallenge, userHandleOf
} from '../db/passkeys.js'
import { recordSecurityEvent } from '../db/security-events.js'
import type { Database, PasskeyRow, UserRow, WebAuthnPurpose } from '../db/types.js'
import { findUserByEmail, findUserById, normalizeEmail } from '../db/users.js'
import {
  LastSignInMethodError, PasskeyAlreadyRegisteredError, PasskeyInvalidError, PasskeyLimitReachedError, PasskeyNotFoundError, PasskeyRejectedError, PasskeyUnknownError,
  PasskeyUserVerificationRequiredError, UnauthorizedError
} from '../errors.js'
import { hashToken } from '../token-hash.js'
import { recordedClient, type SignInLimits } from './limits.js'
import { needsVerifiedEmail } from './new-way-in.js'
import type { AccountEmail, AccountMail } from './mail.js'
import type { Sessions } from './sessions.js'

/**
 * The WebAuthn library, loaded by the first ceremony: with its ASN.1 and X.509 modules it was
 * 0.3 s of every start-up (issue 34), for routes most instances rarely serve.
 */
const webauthn = () => import('@simplewebauthn/server')

/** How long a ceremony's challenge lives (and the browser's timeout). */
export const CEREMONY_TTL_MS = 5 * 60_000

export type RegistrationOptions = PublicKeyCredentialCreationOptionsJSON
export type AuthenticationOptions = PublicKeyCredentialRequestOptionsJSON
export type RegistrationResponse = RegistrationResponseJSON
export type AuthenticationResponse = AuthenticationResponseJSON

/** Why an answer was refused; each caller says it in its own code. */
export type RefusalReason = 'unknown' | 'invalid' | 'user-verification' | 'counter'

/** An answer that did not hold. `userId`: whose passkey it named, when one of ours. */
export class PasskeyRefusal extends Error {
  constructor (readonly reason: RefusalReason, readonly userId?: string) { super(`passkey refused: ${reason}`) }
}

/** What a ceremony's challenge must have been made for. */
export interface Binding {
  userId?: string
  sessionId?: string
  mfaTokenHash?: string
}

/** A signature that checked out, not yet accepted: `accept` moves its counter. */
export interface Assertion {
  user: UserRow
  passkey: PasskeyRow
  userVerified: boolean
  newCounter: number
  backedUp: boolean
}

export interface Passkeys {
  /** The user's passkeys, and their WebAuthn user handle (null until they first asked to register one). */
  list: (userId: string) => Promise<{ passkeys: PasskeyRow[], userHandle: string | null }>
  has: (userId: string) => Promise<boolean>
  /** Registration options for the user's session (its token's `jti`). */
  registrationOptions: (user: UserRow, sessionId: string) => Promise<RegistrationOptions>
  /**
   * The browser's answer to those options, with user verification: the stored passkey; its
   * event and notice in the same transaction. 400 PASSKEY_REJECTED, 409 PASSKEY_ALREADY_REGISTERED,
   * PASSKEY_LIMIT_REACHED (MAX_PASSKEYS: a list shows them all).
   */
  register: (client: Client, user: UserRow, sessionId: string, name: string, response: RegistrationResponse) => Promise<PasskeyRow>
  /** 404 PASSKEY_NOT_FOUND unless it is the user's. */
  rename: (userId: string, id: string, name: string) => Promise<PasskeyRow>
  /** 404 PASSKEY_NOT_FOUND; 409 LAST_SIGN_IN_METHOD when nothing else would sign the account in. */
  remove: (client: Client, user: UserRow, id: string) => Promise<void>
  /**
   * Sign-in options: discoverable (no `email`), or the credentials of the account with that
   * address; an address that is no account's (or an account without passkeys) gets made-up
   * credentials, stable per address, after the same queries: the answer tells nothing. Counted
   * per client before any query (SignInLimits.admitCeremony: 429 past it).
   */
  signInOptions: (client: Client, email?: string) => Promise<AuthenticationOptions>
  /** Options for a user who already proved something: the second factor (`mfaTokenHash`) or a step-up (`sessionId`). */
  optionsFor: (purpose: 'second-factor' | 'step-up', userId: string, binding: Binding) => Promise<AuthenticationOptions>
  /**
   * A sign-in with a passkey alone: the user, once the assertion checked out with user
   * verification and its counter moved. 401 PASSKEY_UNKNOWN (no account has it),
   * PASSKEY_USER_VERIFICATION_REQUIRED, PASSKEY_INVALID (signature, origin, challenge, counter);
   * 429 past the sign-in limits. Failures of a known passkey are failed sign-ins of its account.
   */
  signIn: (client: Client, response: AuthenticationResponse) => Promise<UserRow>
  /** Uses the answer's challenge (made for `purpose` and `binding`) and checks the answer; PasskeyRefusal when it does not hold. */
  check: (client: Client, response: AuthenticationResponse, purpose: WebAuthnPurpose, binding: Binding, requireUserVerification: boolean) => Promise<Assertion>
  /** Accepts a checked answer in `tx`: its counter moves (compare-and-set); false when another request moved it first. */
  accept: (tx: Kysely<Database>, assertion: Assertion) => Promise<boolean>
}

export interface PasskeyDependencies {
  db: Kysely<Database>
  mail: AccountMail
  limits: SignInLimits
  sessions: Pick<Sessions, 'failedSignIn'>
  /** APP_URL: its host is the relying party, its origin the only one accepted. */
  appUrl: string
  /** The identity providers configured (an identity of another signs no one in). */
  providers: string[]
  /** Keys the made-up credentials of addresses that are no account's. */
  decoyKey: Buffer
}

const passkeyName = (name: string) => `A passkey ("${name}")`

/** The challenge an answer carries (in its clientDataJSON, which the signature covers); undefined when unreadable. */
function challengeOf (clientDataJSON: string): string | undefined {
  try {
    const data = JSON.parse(Buffer.from(clientDataJSON, 'base64url').toString('utf8')) as { challenge?: unknown }
    return typeof data.challenge === 'string' && data.challenge.length > 0 && data.challenge.length <= 128 ? data.challenge : undefined
  } catch {
    return undefined
  }
}

/** The counter policy (see the top of this file): whether `next` may follow `stored`. */
export function counterAccepted (backupEligible: boolean, stored: number, next: number): boolean {
  if (backupEligible) return true
  return next > stored || (next === 0 && stored === 0)
}

const transportsOf = (row: PasskeyRow): string[] => row.transports.split(' ').filter((t) => t !== '')

export function passkeyService ({ db, mail, limits, sessions, appUrl, providers, decoyKey }: PasskeyDependencies): Passkeys {
  const { hostname: rpID, origin, host } = new URL(appUrl)
  const recipient = (user: UserRow) => ({ id: user.id, email: user.email })

  /** A new challenge for `purpose`, kept as its hash: the bytes, for the options. */
  async function newChallenge (purpose: WebAuthnPurpose, userId: string | null, binding: Binding): Promise<Uint8Array<ArrayBuffer>> {
    const bytes = new Uint8Array(32)
    getRandomValues(bytes)
    await createWebAuthnChallenge(db, {
      challenge_hash: hashToken(Buffer.from(bytes).toString('base64url')),
      purpose,
      user_id: userId,
      session_id: binding.sessionId ?? null,
      mfa_token_hash: binding.mfaTokenHash ?? null,
      expires_at: new Date(Date.now() + CEREMONY_TTL_MS)
    })
    return bytes
  }

  /** Uses the challenge `clientDataJSON` carries, when it was made for `purpose` and `binding`; else a refusal. */
  async function useChallenge (clientDataJSON: string, purpose: WebAuthnPurpose, binding: Binding) {
    const challenge = challengeOf(clientDataJSON)
    if (challenge === undefined) throw new PasskeyRefusal('invalid')
    // A sign-in's challenge may have been made for an address that is no account's.
    const row = await takeWebAuthnChallenge(db, hashToken(challenge), purpose === 'sign-in' ? ['sign-in', 'sign-in-nobody'] : [purpose])
    if (row === undefined) throw new PasskeyRefusal('invalid')
    // A challenge made for one user (session, sign-in) answered for another.
    if (binding.userId !== undefined && row.user_id !== binding.userId) throw new PasskeyRefusal('invalid')
    if (binding.sessionId !== undefined && row.session_id !== binding.sessionId) throw new PasskeyRefusal('invalid')
    if (binding.mfaTokenHash !== undefined && row.mfa_token_hash !== binding.mfaTokenHash) throw new PasskeyRefusal('invalid')
    return { challenge, userId: row.user_id, forNobody: row.purpose === 'sign-in-nobody' }
  }

  /** A credential id for an address that has no passkey: the same for that address every time. */
  const decoyCredential = (email: string): string => createHmac('sha256', decoyKey).update(email).digest().subarray(0, 16).toString('base64url')

  const authenticationOptions = async (challenge: Uint8Array<ArrayBuffer>, allow: Array<{ id: string, transports?: string[] }> | undefined, userVerification: 'required' | 'preferred') =>
    (await webauthn()).generateAuthenticationOptions({ rpID, challenge, timeout: CEREMONY_TTL_MS, userVerification, ...(allow !== undefined && { allowCredentials: allow }) })

  const service: Passkeys = {
    async list (userId) {
      const [passkeys, userHandle] = await Promise.all([listPasskeys(db, userId), findUserHandle(db, userId)])
      return { passkeys, userHandle: userHandle ?? null }
    },

    has: async (userId) => await countPasskeys(db, userId) > 0,

    async registrationOptions (user, sessionId) {
      needsVerifiedEmail(user)
      const handle = await userHandleOf(db, user.id, () => randomBytes(32).toString('base64url'))
      const existing = await listPasskeys(db, user.id)
      const challenge = await newChallenge('registration', user.id, { sessionId })
      return (await webauthn()).generateRegistrationOptions({
        rpName: host,
        rpID,
        userID: new Uint8Array(Buffer.from(handle, 'base64url')),
        userName: user.email,
        userDisplayName: user.name ?? user.email,
        challenge,
        timeout: CEREMONY_TTL_MS,
        attestationType: 'none',
        excludeCredentials: existing.map((p) => ({ id: p.credential_id, transports: transportsOf(p) })),
        // Required: a passkey registered here can sign in alone, so it must verify its user.
        authenticatorSelection: { residentKey: 'preferred', userVerification: 'required' }
      })
    },

    async register (client, user, sessionId, name, response) {
      needsVerifiedEmail(user)
      const used = await useChallenge(response.response.clientDataJSON, 'registration', { userId: user.id, sessionId }).catch((err: unknown) => {
        if (err instanceof PasskeyRefusal) throw new PasskeyRejectedError()
        throw err
      })
      // The library throws on anything that does not hold (origin, RP id, challenge, no user verification, attestation).
      const verified = await (await webauthn()).verifyRegistrationResponse({
        response, expectedChallenge: used.challenge, expectedOrigin: origin, expectedRPID: rpID, requireUserVerification: true
      }).catch(() => { throw new PasskeyRejectedError() })
      if (!verified.verified) throw new PasskeyRejectedError()
      const info = verified.registrationInfo
      return mail.transaction(async (tx) => {
        // Counted with the user's row locked: two registrations at once cannot both pass the cap.
        if (await lockUserPasskeys(tx, user.id) >= MAX_PASSKEYS) throw new PasskeyLimitReachedError()
        const row = await insertPasskey(tx, {
          id: randomUUID(),
          user_id: user.id,
          name,
          credential_id: info.credential.id,
          public_key: Buffer.from(info.credential.publicKey).toString('base64url'),
          counter: info.credential.counter,
          transports: (info.credential.transports ?? []).join(' ').slice(0, 255),
          backup_eligible: info.credentialDeviceType === 'multiDevice',
          backed_up: info.credentialBackedUp,
          aaguid: info.aaguid
        })
        if (row === undefined) throw new PasskeyAlreadyRegisteredError()
        await recordSecurityEvent(tx, { userId: user.id, type: 'passkey-added', method: 'passkey', ...recordedClient(client) })
        const emails: AccountEmail[] = [{ kind: 'sign-in-method', user: recipient(user), change: 'added', what: passkeyName(name) }]
        return { value: row, emails }
      })
    },

    async rename (userId, id, name) {
      const row = await renamePasskey(db, userId, id, name)
      if (row === undefined) throw new PasskeyNotFoundError()
      return row
    },

    async remove (client, user, id) {
      await mail.transaction(async (tx) => {
        // The user's row locked: two removals of ways in (passkeys, identities) run one after the other.
        const methods = await lockUserSignInMethods(tx, user.id, providers)
        if (methods === undefined) throw new UnauthorizedError()
        const removed = await deletePasskey(tx, user.id, id)
        if (removed === undefined) throw new PasskeyNotFoundError()
        if (!methods.hasPassword && methods.identities < 1 && await countPasskeys(tx, user.id) < 1) throw new LastSignInMethodError()
        await recordSecurityEvent(tx, { userId: user.id, type: 'passkey-removed', method: 'passkey', ...recordedClient(client) })
        return { value: undefined, emails: [{ kind: 'sign-in-method', user: recipient(user), change: 'removed', what: passkeyName(removed.name) }] }
      })
    },

    async signInOptions (client, email) {
      // Each stores a challenge: counted per client, before any query.
      await limits.admitCeremony(client)
      if (email === undefined) return authenticationOptions(await newChallenge('sign-in', null, {}), undefined, 'required')
      const address = normalizeEmail(email)
      const user = await findUserByEmail(db, address)
      // The same queries whether or not the address is an account's.
      const passkeys = await listPasskeys(db, user?.id ?? '')
      // Transports are left out: an account's passkeys and made-up ones look alike.
      const allow = passkeys.length > 0 ? passkeys.map((p) => ({ id: p.credential_id })) : [{ id: decoyCredential(address) }]
      // Bound to that account, or to nobody: no passkey signs in by an address that is no account's.
      const challenge = user === undefined ? await newChallenge('sign-in-nobody', null, {}) : await newChallenge('sign-in', user.id, {})
      return authenticationOptions(challenge, allow, 'required')
    },

    async optionsFor (purpose, userId, binding) {
      const passkeys = await listPasskeys(db, userId)
      const challenge = await newChallenge(purpose, userId, binding)
      // Presence is enough here: the user proved something already (a password, a session).
      return authenticationOptions(challenge, passkeys.map((p) => ({ id: p.credential_id, transports: transportsOf(p) })), 'preferred')
    },

    async check (client, response, purpose, binding, requireUserVerification) {
      const { challenge, userId: boundTo, forNobody } = await useChallenge(response.response.clientDataJSON, purpose, binding)
      const passkey = await findPasskeyByCredential(db, response.id)
      if (passkey === undefined) throw new PasskeyRefusal('unknown')
      // Another account's passkey, for a ceremony made for this one: no signal that it is unknown
      // (it is not). One made for an address that is no account's is refused at the same point,
      // so that signing it tells nothing the account's would not.
      if (forNobody || (boundTo !== null && passkey.user_id !== boundTo)) throw new PasskeyRefusal('invalid')
      const user = await findUserById(db, passkey.user_id)
      if (user === undefined) throw new PasskeyRefusal('unknown')
      const refuse = (reason: RefusalReason) => new PasskeyRefusal(reason, user.id)
      const { userHandle } = response.response
      if (userHandle !== undefined && userHandle !== null && userHandle !== await findUserHandle(db, user.id)) throw refuse('invalid')
      const stored = Number(passkey.counter)
      let info: Awaited<ReturnType<typeof verifyAuthenticationResponse>>['authenticationInfo']
      try {
        const verified = await (await webauthn()).verifyAuthenticationResponse({
          response,
          expectedChallenge: challenge,
          expectedOrigin: origin,
          expectedRPID: rpID,
          // The counter is judged below by our policy (the library's refuses synced passkeys whose counter stands still).
          credential: { id: passkey.credential_id, publicKey: Buffer.from(passkey.public_key, 'base64url'), counter: 0, transports: transportsOf(passkey) },
          requireUserVerification: false
        })
        if (!verified.verified) throw refuse('invalid')
        info = verified.authenticationInfo
      } catch (err) {
        if (err instanceof PasskeyRefusal) throw err
        throw refuse('invalid')
      }
      // Backup eligibility is fixed for a credential's life: one that changed is not the passkey registered.
      if ((info.credentialDeviceType === 'multiDevice') !== passkey.backup_eligible) throw refuse('invalid')
      if (!counterAccepted(passkey.backup_eligible, stored, info.newCounter)) {
        await recordSecurityEvent(db, { userId: user.id, type: 'passkey-counter-rejected', method: 'passkey', ...recordedClient(client) })
        throw refuse('counter')
      }
      if (requireUserVerification && !info.userVerified) throw refuse('user-verification')
      return { user, passkey, userVerified: info.userVerified, newCounter: info.newCounter, backedUp: info.credentialBackedUp }
    },

    accept: (tx, assertion) =>
      advancePasskeyCounter(tx, assertion.passkey.id, Number(assertion.passkey.counter), assertion.newCounter, assertion.backedUp),

    async signIn (client, response) {
      // Counted like any sign-in attempt, before any query.
      await limits.admit(client)
      try {
        const assertion = await service.check(client, response, 'sign-in', {}, true)
        if (!await service.accept(db, assertion)) throw new PasskeyRefusal('invalid', assertion.user.id)
        return assertion.user
      } catch (err) {
        if (!(err instanceof PasskeyRefusal)) throw err
        if (err.userId !== undefined) sessions.failedSignIn(err.userId, client, 'passkey')
        if (err.reason === 'unknown') throw new PasskeyUnknownError()
        if (err.reason === 'user-verification') throw new PasskeyUserVerificationRequiredError()
        throw new PasskeyInvalidError()
      }
    }
  }
  return service
}
