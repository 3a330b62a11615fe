// A second factor, TOTP with recovery codes (docs/second-factor.md, auth-extensions §3).
import { Type, type Static } from 'typebox'
import { ref, Success } from './common.js'
import { AuthenticationResponse } from './passkeys.js'
import { AuthResponse, MAX_PASSWORD_BYTES, User } from './users.js'

/** A TOTP code as typed: six digits, blanks or a hyphen between them allowed. */
const TotpCode = Type.String({ minLength: 6, maxLength: 16, pattern: '^[0-9 -]+$', description: 'The authenticator app\'s current 6-digit code', examples: ['123456'] })
const RecoveryCode = Type.String({
  minLength: 1, maxLength: 64, description: 'One of the recovery codes shown when two-step sign-in was turned on (case, blanks and hyphens do not matter)'
})
const CurrentPassword = Type.String({ minLength: 1, maxLength: MAX_PASSWORD_BYTES, description: 'The account\'s current password' })
const Methods = Type.Array(Type.Enum(['totp', 'recovery', 'passkey'], { type: 'string' }), { description: 'What POST /auth/mfa takes for this account (`passkey` when it has one)' })

export const MfaChallenge = Type.Object({
  success: Type.Literal(true),
  mfaRequired: Type.Literal(true),
  mfaToken: Type.String({ description: 'For POST /auth/mfa: 5 minutes, 5 tries, once. Not a token for anything else' }),
  methods: Methods
}, { $id: 'MfaChallenge', description: 'The password (or reset, or provider) checked out; the account has two-step sign-in: no token yet' })

/** What a sign-in that may need a second factor answers: signed in, or the challenge. */
export const SignInResponse = Type.Union([ref(AuthResponse), ref(MfaChallenge)], {
  $id: 'SignInResponse',
  description: 'Signed in (`token`), or, for an account with two-step sign-in, `mfaRequired` with the `mfaToken` for POST /auth/mfa'
})

export const MfaBody = Type.Object({
  mfaToken: Type.String({ minLength: 1, maxLength: 128 }),
  code: Type.Optional(TotpCode),
  recoveryCode: Type.Optional(RecoveryCode),
  passkey: Type.Optional(ref(AuthenticationResponse))
}, {
  $id: 'MfaBody',
  additionalProperties: false,
  description: 'The `mfaToken` and one of `code`, `recoveryCode` or `passkey` (`credential.toJSON()` for the options of POST /auth/passkey/options `{mfaToken}`)',
  examples: [{ mfaToken: '…', code: '123456' }, { mfaToken: '…', recoveryCode: 'abcde-fghjk' }]
})
export type MfaBody = Static<typeof MfaBody>

export const MfaSignedIn = Type.Object({
  success: Type.Literal(true),
  token: AuthResponse.properties.token,
  user: ref(User),
  recoveryCodesLeft: Type.Optional(Type.Integer({ minimum: 0, description: 'After a recovery code: how many unused ones are left' }))
}, { $id: 'MfaSignedIn', description: 'Signed in: the token and the user' })

export const TotpEnrolBody = Type.Object({ currentPassword: CurrentPassword }, { $id: 'TotpEnrolBody', additionalProperties: false })
export const TotpConfirmBody = Type.Object({ code: TotpCode }, { $id: 'TotpConfirmBody', additionalProperties: false })
export const TotpCodeBody = Type.Object({ currentPassword: CurrentPassword, code: TotpCode }, { $id: 'TotpCodeBody', additionalProperties: false })

export const TotpEnrolment = Success(Type.Object({
  secret: Type.String({ description: 'The seed, base32, for typing into an authenticator app; shown this once' }),
  otpauthUrl: Type.String({ description: 'The same as an otpauth:// URI, for a QR code (SHA-1, 6 digits, 30 s; the issuer is APP_URL\'s host)' })
}), { $id: 'TotpEnrolment' })

export const RecoveryCodes = Success(Type.Object({
  recoveryCodes: Type.Array(Type.String(), { minItems: 10, maxItems: 10, description: 'Each signs in once in place of a code; shown this once, stored hashed' })
}), { $id: 'RecoveryCodes' })

export const MfaStatus = Success(Type.Object({
  totp: Type.Enum(['off', 'pending', 'on'], { type: 'string', description: '`pending`: enrolled, waiting for its first code (POST /account/mfa/totp/confirm)' }),
  recoveryCodesLeft: Type.Integer({ minimum: 0 })
}), { $id: 'MfaStatus' })
