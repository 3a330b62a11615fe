// A second factor (auth-extensions §3, docs/second-factor.md): TOTP with recovery codes.
// - Enrolment: the current password (and a recent sign-in: the routes are `x-step-up`) gives a
//   pending seed, sealed at rest (accounts/secret-seal.ts); its first code confirms it and
//   yields ten recovery codes, shown once, each kept as its own hash.
// - A sign-in whose first factor checked out is asked for it by the door (accounts/sign-in.ts)
//   through a challenge: an opaque `mfaToken`, kept as its hash, 5 minutes, 5 tries, used once,
//   bound to the password it followed.
// - `prove` checks an answer (a code, a recovery code, or at sign-in a passkey: presence is
//   enough for a second factor, accounts/passkeys.ts) and runs the caller's change (start a
//   session, record a step-up, turn the factor off, …) in the transaction that accepts it: the
//   last accepted time step moves forward by compare-and-set, or the recovery code is used, or
//   the passkey's counter moves (compare-and-set), in that same transaction, so a code works once however many requests race with it.
// - Ten wrong answers in a row on an account, over any number of challenges, suspend its checks
//   for 15 minutes (429 RATE_LIMITED) and mail its owner.
// No Fastify here: the client comes in as plain facts.
import { randomBytes } from 'node:crypto'
import type { Kysely } from 'kysely'
import type { Client } from '../client-address.js'
import {
  advanceTotpStep, clearSecondFactorFailures, confirmTotp, createChallenge, deleteSecondFactor, findLiveChallenge, findTotpFactor, hasTotp, releaseSecondFactorTry, takeSecondFactorTry,
  recoveryCodesLeft, replaceRecoveryCodes, resealTotp, savePendingTotp, takeChallengeTry, useChallenge, useRecoveryCode
} from '../db/second-factor.js'
import { recordSecurityEvent } from '../db/security-events.js'
import type { Database, MfaChallengeRow, UserRow } from '../db/types.js'
import { findUserById } from '../db/users.js'
import {
  MfaAlreadyEnabledError, MfaCodeIncorrectError, MfaNotConfiguredError, MfaNotEnabledError, MfaNotPendingError, MfaTokenInvalidError, rateLimited
} from '../errors.js'
import { hashToken } from '../token-hash.js'
import { checkCurrentPassword } from './current-password.js'
import { recordedClient, type SignInLimits } from './limits.js'
import { needsVerifiedEmail } from './new-way-in.js'
import type { AccountEmail, AccountMail, ChangeWithMail } from './mail.js'
import { PasskeyRefusal, type AuthenticationResponse, type Passkeys } from './passkeys.js'
import { SealOpenError, type Sealer } from './secret-seal.js'
import type { Passwords } from './service.js'
import type { Sessions } from './sessions.js'
import { matchStep, newRecoveryCodes, newTotpSecret, otpauthUrl, recoveryCodeHash } from './totp.js'

/** How long an `mfaToken` lives, and how many answers it takes. */
export const CHALLENGE_TTL_MS = 5 * 60_000
export const CHALLENGE_TRIES = 5
/** Wrong answers in a row that suspend an account's second-factor checks, and for how long. */
export const FAILURES_BEFORE_SUSPENSION = 10
export const SUSPENSION_SECONDS = 15 * 60

/** An answer to the second factor: a passkey's only at sign-in, for the challenge it answers. */
export type SecondFactorAnswer = { code: string } | { recoveryCode: string } | { passkey: AuthenticationResponse }

/** What proved the second factor. */
export type SecondFactorMethod = 'totp' | 'recovery' | 'passkey'

/** What a sign-in waiting for its second factor followed: the first factor's way. */
export type ChallengedWay = 'password' | 'password-reset' | 'provider'

export interface Challenge {
  mfaToken: string
  /** What POST /auth/mfa takes for this account (`passkey` when it has one). */
  methods: SecondFactorMethod[]
}

/** A challenge whose `mfaToken` checked out, one try taken: the user, and what it followed. */
export interface OpenChallenge {
  user: UserRow
  way: ChallengedWay
  provider: string | null
  tokenHash: string
}

export interface Proved<T> {
  value: T
  /** After a recovery code: how many are left. */
  recoveryCodesLeft?: number
}

export interface SecondFactorStatus {
  totp: 'off' | 'pending' | 'on'
  recoveryCodesLeft: number
}

export interface SecondFactor {
  status: (userId: string) => Promise<SecondFactorStatus>
  /** Whether a sign-in of this user needs the second factor. */
  isOn: (userId: string) => Promise<boolean>
  /**
   * A pending seed for the user (replacing a pending one), after their current password: the
   * seed and its otpauth:// URI. 409 MFA_ALREADY_ENABLED, 400 INVALID_CURRENT_PASSWORD (a failed
   * sign-in: limited like one), 400 PASSWORD_NOT_SET, 503 MFA_NOT_CONFIGURED.
   */
  enrol: (client: Client, user: UserRow, currentPassword: string) => Promise<{ secret: string, otpauthUrl: string }>
  /**
   * The pending seed's first code turns it on: ten recovery codes, shown this once. 409
   * MFA_NOT_PENDING, MFA_ALREADY_ENABLED; 400 MFA_CODE_INCORRECT.
   */
  confirm: (client: Client, user: UserRow, code: string) => Promise<{ recoveryCodes: string[] }>
  /** Turns it off with the current password and a code: 409 MFA_NOT_ENABLED, 400 INVALID_CURRENT_PASSWORD, MFA_CODE_INCORRECT. */
  disable: (client: Client, user: UserRow, currentPassword: string, code: string) => Promise<void>
  /** Ten new recovery codes, the old void: as `disable`. */
  regenerate: (client: Client, user: UserRow, currentPassword: string, code: string) => Promise<{ recoveryCodes: string[] }>
  /** A challenge for a sign-in of `user` whose first factor (`way`) checked out. */
  challenge: (user: UserRow, way: ChallengedWay, provider?: string) => Promise<Challenge>
  /**
   * The user a live challenge waits for (no try taken: for a passkey's options, so counted per
   * client as a passkey ceremony, before any query: SignInLimits.admitCeremony, 429); 401 MFA_TOKEN_INVALID.
   */
  pendingUser: (client: Client, mfaToken: string) => Promise<{ userId: string, tokenHash: string }>
  /**
   * Takes one try of the challenge an `mfaToken` names, once the client is within the sign-in
   * limits (429): 401 MFA_TOKEN_INVALID when it is unknown, used, expired, out of tries, or its
   * user's password changed since.
   */
  openChallenge: (client: Client, mfaToken: string) => Promise<OpenChallenge>
  /**
   * Checks `answer` (a recovery code only when `recovery` allows it, a passkey only for a
   * `challenge`, whose user it must be) and, in the transaction that accepts it, runs `change`
   * (its emails queued in it too) and uses `challenge` when given. A wrong, used or replayed
   * answer throws what `wrong` returns (`guessed`: a wrong one, which counts toward the
   * suspension; false for a replay or a lost race, which is no guess; `method`: what was tried).
   * 429 RATE_LIMITED while suspended; 409 MFA_NOT_ENABLED.
   */
  prove: <T>(client: Client, user: UserRow, answer: SecondFactorAnswer, options: {
    wrong: (guessed: boolean, method: SecondFactorMethod) => Promise<Error>
    change: (tx: Kysely<Database>, method: SecondFactorMethod) => Promise<ChangeWithMail<T>>
    recovery?: boolean
    challenge?: OpenChallenge
  }) => Promise<Proved<T>>
}

export interface SecondFactorDependencies {
  db: Kysely<Database>
  mail: AccountMail
  passwords: Passwords
  limits: SignInLimits
  sessions: Pick<Sessions, 'failedSignIn'>
  passkeys: Pick<Passkeys, 'has' | 'check' | 'accept'>
  /** Seals seeds at rest; null when no key is configured (production without MFA_ENCRYPTION_KEY). */
  sealer: Sealer | null
  /** The issuer an authenticator app shows: APP_URL's host. */
  issuer: string
  warn: (err: unknown, message: string) => void
}

/** The binding of a challenge to the password it followed: a changed password (or a first one) voids it. */
const passwordFingerprint = (user: Pick<UserRow, 'password'>): string => hashToken(user.password ?? '')
const sealContext = (userId: string): string => `totp:${userId}`
const TOTP_NAME = 'Two-step sign-in with an authenticator app'

/** Thrown inside a transaction to undo it: the answer did not hold. */
class Refused extends Error {
  constructor (readonly counts: boolean) { super('refused') }
}

export function secondFactorService ({ db, mail, passwords, limits, sessions, passkeys, sealer, issuer, warn }: SecondFactorDependencies): SecondFactor {
  const recipient = (user: UserRow) => ({ id: user.id, email: user.email })
  const needSealer = (): Sealer => {
    if (sealer === null) throw new MfaNotConfiguredError()
    return sealer
  }
  /** The user's seed; 503 MFA_NOT_CONFIGURED (and a warning) when it does not open: the key that sealed it is not configured. */
  const openSeed = (seal: Sealer, userId: string, sealed: string): { plain: string, stale: boolean } => {
    try {
      return seal.open(sealed, sealContext(userId))
    } catch (err) {
      if (!(err instanceof SealOpenError)) throw err
      warn(err, 'a TOTP seed does not open: is MFA_ENCRYPTION_KEY (or _PREVIOUS) the key that sealed it?')
      throw new MfaNotConfiguredError()
    }
  }

  /** The current password is checked like a sign-in (limited, locked, a failure counted). */
  const passwordCheck = { passwords, limits, sessions }

  /** New recovery codes replace the old in `tx`: the codes, to show once. */
  async function newCodes (tx: Kysely<Database>, userId: string): Promise<string[]> {
    const codes = newRecoveryCodes()
    await replaceRecoveryCodes(tx, userId, codes.map((code) => recoveryCodeHash(userId, code)))
    return codes
  }

  /**
   * A wrong answer, counted when its try was taken; the tenth in a row (`suspended`: its try
   * suspended the checks) holds the suspension, and the owner is told.
   */
  async function failed (client: Client, user: UserRow, method: SecondFactorMethod, suspended: boolean): Promise<void> {
    sessions.failedSignIn(user.id, client, method)
    if (!suspended) return
    try {
      await mail.transaction(async (tx) => {
        await recordSecurityEvent(tx, { userId: user.id, type: 'mfa-suspended', method, ...recordedClient(client) })
        return { value: undefined, emails: [{ kind: 'second-factor', user: recipient(user), event: 'suspended' }] }
      })
    } catch (err) {
      warn(err, 'recording a second-factor suspension failed')
    }
  }

  const service: SecondFactor = {
    async status (userId) {
      const factor = await findTotpFactor(db, userId)
      if (factor === undefined) return { totp: 'off', recoveryCodesLeft: 0 }
      if (factor.confirmed_at === null) return { totp: 'pending', recoveryCodesLeft: 0 }
      return { totp: 'on', recoveryCodesLeft: await recoveryCodesLeft(db, userId) }
    },

    isOn: (userId) => hasTotp(db, userId),

    async enrol (client, user, currentPassword) {
      const seal = needSealer()
      needsVerifiedEmail(user)
      if (await hasTotp(db, user.id)) throw new MfaAlreadyEnabledError()
      await checkCurrentPassword(passwordCheck, client, user, currentPassword)
      const secret = newTotpSecret()
      if (!await savePendingTotp(db, user.id, seal.seal(secret, sealContext(user.id)))) throw new MfaAlreadyEnabledError()
      return { secret, otpauthUrl: otpauthUrl(secret, issuer, user.email) }
    },

    async confirm (client, user, code) {
      const seal = needSealer()
      needsVerifiedEmail(user)
      await limits.admit(client)
      const factor = await findTotpFactor(db, user.id)
      if (factor === undefined) throw new MfaNotPendingError()
      if (factor.confirmed_at !== null) throw new MfaAlreadyEnabledError()
      const step = matchStep(openSeed(seal, user.id, factor.secret).plain, code)
      if (step === null) throw new MfaCodeIncorrectError()
      return mail.transaction(async (tx) => {
        // Another request confirmed it meanwhile (with its own codes).
        if (!await confirmTotp(tx, user.id, step)) throw new MfaAlreadyEnabledError()
        const recoveryCodes = await newCodes(tx, user.id)
        await recordSecurityEvent(tx, { userId: user.id, type: 'mfa-enabled', method: 'totp', ...recordedClient(client) })
        const emails: AccountEmail[] = [{ kind: 'sign-in-method', user: recipient(user), change: 'added', what: TOTP_NAME }]
        return { value: { recoveryCodes }, emails }
      })
    },

    async disable (client, user, currentPassword, code) {
      if (!await hasTotp(db, user.id)) throw new MfaNotEnabledError()
      await checkCurrentPassword(passwordCheck, client, user, currentPassword)
      await service.prove(client, user, { code }, {
        wrong: async () => new MfaCodeIncorrectError(),
        change: async (tx) => {
          await deleteSecondFactor(tx, user.id)
          await recordSecurityEvent(tx, { userId: user.id, type: 'mfa-disabled', method: 'totp', ...recordedClient(client) })
          return { value: undefined, emails: [{ kind: 'sign-in-method', user: recipient(user), change: 'removed', what: TOTP_NAME }] }
        }
      })
    },

    async regenerate (client, user, currentPassword, code) {
      if (!await hasTotp(db, user.id)) throw new MfaNotEnabledError()
      await checkCurrentPassword(passwordCheck, client, user, currentPassword)
      const { value } = await service.prove(client, user, { code }, {
        wrong: async () => new MfaCodeIncorrectError(),
        change: async (tx) => {
          const recoveryCodes = await newCodes(tx, user.id)
          await recordSecurityEvent(tx, { userId: user.id, type: 'recovery-codes-generated', ...recordedClient(client) })
          return { value: { recoveryCodes }, emails: [{ kind: 'second-factor', user: recipient(user), event: 'recovery-codes' }] }
        }
      })
      return value
    },

    async challenge (user, way, provider) {
      const mfaToken = randomBytes(32).toString('base64url')
      await createChallenge(db, {
        token_hash: hashToken(mfaToken),
        user_id: user.id,
        way,
        provider: provider ?? null,
        password_fingerprint: passwordFingerprint(user),
        tries_left: CHALLENGE_TRIES,
        expires_at: new Date(Date.now() + CHALLENGE_TTL_MS)
      })
      return { mfaToken, methods: await passkeys.has(user.id) ? ['totp', 'recovery', 'passkey'] : ['totp', 'recovery'] }
    },

    async pendingUser (client, mfaToken) {
      await limits.admitCeremony(client)
      const tokenHash = hashToken(mfaToken)
      const row = await findLiveChallenge(db, tokenHash)
      if (row === undefined) throw new MfaTokenInvalidError()
      return { userId: row.user_id, tokenHash }
    },

    async openChallenge (client, mfaToken) {
      // Every answer counts against the client like a sign-in attempt, before any query.
      await limits.admit(client)
      const tokenHash = hashToken(mfaToken)
      const row: MfaChallengeRow | undefined = await takeChallengeTry(db, tokenHash)
      if (row === undefined) throw new MfaTokenInvalidError()
      const user = await findUserById(db, row.user_id)
      if (user === undefined || passwordFingerprint(user) !== row.password_fingerprint) throw new MfaTokenInvalidError()
      return { user, way: row.way, provider: row.provider, tokenHash }
    },

    async prove (client, user, answer, { wrong, change, recovery = false, challenge }) {
      // The try is taken before the answer is checked: of answers sent at once, on any
      // instances, no more than the tries left before the suspension are ever checked.
      const factor = await takeSecondFactorTry(db, user.id, FAILURES_BEFORE_SUSPENSION, SUSPENSION_SECONDS)
      if (factor === undefined) {
        const current = await findTotpFactor(db, user.id)
        if (current === undefined || current.confirmed_at === null) throw challenge === undefined ? new MfaNotEnabledError() : new MfaTokenInvalidError()
        throw rateLimited(Math.max(current.suspended_for, 1))
      }
      const useIt = async (tx: Kysely<Database>): Promise<void> => {
        // Two answers to one challenge racing: one signs in.
        if (challenge !== undefined && !await useChallenge(tx, challenge.tokenHash)) throw new Refused(false)
      }
      const method: SecondFactorMethod = 'code' in answer ? 'totp' : 'passkey' in answer ? 'passkey' : 'recovery'
      try {
        if ('passkey' in answer) {
          // A passkey answers the challenge of this sign-in only, with a passkey of its user.
          if (challenge === undefined) throw new Refused(false)
          const assertion = await passkeys.check(client, answer.passkey, 'second-factor', { userId: user.id, mfaTokenHash: challenge.tokenHash }, false)
            .catch((err: unknown) => { throw err instanceof PasskeyRefusal ? new Refused(true) : err })
          return await mail.transaction(async (tx) => {
            // Compare-and-set: another request moved the counter first.
            if (!await passkeys.accept(tx, assertion)) throw new Refused(false)
            await clearSecondFactorFailures(tx, user.id)
            await useIt(tx)
            const { value, emails } = await change(tx, 'passkey')
            return { value: { value }, emails }
          })
        }
        if ('code' in answer) {
          const seal = needSealer()
          const opened = openSeed(seal, user.id, factor.secret)
          const step = matchStep(opened.plain, answer.code)
          if (step === null) throw new Refused(true)
          return await mail.transaction(async (tx) => {
            // Compare-and-set: a code of this step, or of a later one, was accepted already (a replay).
            if (!await advanceTotpStep(tx, user.id, step)) throw new Refused(false)
            if (opened.stale) await resealTotp(tx, user.id, seal.seal(opened.plain, sealContext(user.id)))
            await useIt(tx)
            const { value, emails } = await change(tx, 'totp')
            return { value: { value }, emails }
          })
        }
        if (!recovery) throw new Refused(false)
        const hash = recoveryCodeHash(user.id, answer.recoveryCode)
        return await mail.transaction(async (tx) => {
          if (!await useRecoveryCode(tx, user.id, hash)) throw new Refused(true)
          await clearSecondFactorFailures(tx, user.id)
          await useIt(tx)
          const left = await recoveryCodesLeft(tx, user.id)
          await recordSecurityEvent(tx, { userId: user.id, type: 'recovery-code-used', method: 'recovery', ...recordedClient(client) })
          const { value, emails } = await change(tx, 'recovery')
          const notice: AccountEmail = { kind: 'second-factor', user: recipient(user), event: 'recovery-code-used', recoveryCodesLeft: left }
          return { value: { value, recoveryCodesLeft: left }, emails: [...emails, notice] }
        })
      } catch (err) {
        if (err instanceof Refused && err.counts) {
          await failed(client, user, method, factor.suspends)
          throw await wrong(true, method)
        }
        // No guess (a replay, a lost race) or a failure of ours: the try is given back.
        await releaseSecondFactorTry(db, user.id, factor.suspends, FAILURES_BEFORE_SUSPENSION)
        if (err instanceof Refused) throw await wrong(false, method)
        throw err
      }
    }
  }
  return service
}
