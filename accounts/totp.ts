// The arithmetic of a second factor, with no state (auth-extensions §3): TOTP seeds and codes
// through `otpauth` (RFC 6238: SHA-1, 6 digits, 30-second steps), and recovery codes. What a
// code is accepted against (the last step used, the account's failures) is
// accounts/second-factor.ts's.
import { createHash, randomBytes, randomInt } from 'node:crypto'
import { Secret, TOTP } from 'otpauth'

export const TOTP_PERIOD_SECONDS = 30
const TOTP_DIGITS = 6
/** Steps either side of now a code is accepted for: clocks apart, and the time it takes to type. */
const TOTP_WINDOW = 1
/** RFC 4226 §4 asks for at least 128 bits and recommends 160. */
const SECRET_BYTES = 20

/** A new seed, base32 (what authenticator apps take). */
export const newTotpSecret = (): string => new Secret({ buffer: randomBytes(SECRET_BYTES).buffer }).base32

/** The `otpauth://` URI an authenticator app reads from a QR code: the issuer, and the account as its label. */
export const otpauthUrl = (secret: string, issuer: string, account: string): string =>
  new TOTP({ issuer, label: account, secret: Secret.fromBase32(secret), algorithm: 'SHA1', digits: TOTP_DIGITS, period: TOTP_PERIOD_SECONDS }).toString()

/** A code as typed: blanks and hyphens dropped ("123 456", "123-456"). */
const cleanCode = (code: string): string => code.replace(/[\s-]/g, '')

/**
 * The time step (Unix seconds / 30) `code` belongs to, when it is the seed's code for now or
 * the step either side; null otherwise. Compared in constant time (otpauth).
 */
export function matchStep (secret: string, code: string, now = Date.now()): number | null {
  const token = cleanCode(code)
  if (!/^[0-9]{6}$/.test(token)) return null
  const delta = TOTP.validate({ token, secret: Secret.fromBase32(secret), algorithm: 'SHA1', digits: TOTP_DIGITS, period: TOTP_PERIOD_SECONDS, timestamp: now, window: TOTP_WINDOW })
  return delta === null ? null : Math.floor(now / 1000 / TOTP_PERIOD_SECONDS) + delta
}

export const RECOVERY_CODE_COUNT = 10
// 31 letters and digits with none that reads as another (no 0/o, 1/l/i): almost 5 bits a character.
const RECOVERY_ALPHABET = 'abcdefghjkmnpqrstuvwxyz23456789'
const RECOVERY_HALF = 5

/** Ten new recovery codes, `xxxxx-xxxxx`: 10 characters of 31, about 49 bits each. */
export function newRecoveryCodes (): string[] {
  const half = (): string => Array.from({ length: RECOVERY_HALF }, () => RECOVERY_ALPHABET[randomInt(RECOVERY_ALPHABET.length)]).join('')
  return Array.from({ length: RECOVERY_CODE_COUNT }, () => `${half()}-${half()}`)
}

/** A recovery code as typed, normalised: case, blanks and hyphens do not matter. */
const normaliseRecoveryCode = (code: string): string => code.toLowerCase().replace(/[\s-]/g, '')

/** What is stored of a recovery code: the SHA-256 of the user's id and the normalised code. */
export const recoveryCodeHash = (userId: string, code: string): string =>
  createHash('sha256').update(`${userId}\n${normaliseRecoveryCode(code)}`, 'utf8').digest('hex')
