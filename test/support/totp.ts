// TOTP codes as an authenticator app computes them from the seed (RFC 6238: SHA-1, 6 digits,
// 30-second steps), and a wait for tests whose codes must be judged in the step they were made for.
import { Secret, TOTP } from 'otpauth'

const STEP_MS = 30_000

/** The code of `secret` (base32, as enrolment answers it) at `ms`. */
export const codeAt = (secret: string, ms: number = Date.now()): string =>
  TOTP.generate({ secret: Secret.fromBase32(secret), algorithm: 'SHA1', digits: 6, period: STEP_MS / 1000, timestamp: ms })

/**
 * Waits, if the current step has less than `leftMs` to go, until the next one has begun: the
 * codes computed in the next `leftMs` are then judged by the server in the step they were made for.
 */
export async function midStep (leftMs = 3_000): Promise<void> {
  const into = Date.now() % STEP_MS
  if (into > STEP_MS - leftMs) await new Promise((resolve) => setTimeout(resolve, STEP_MS - into + 50))
}
