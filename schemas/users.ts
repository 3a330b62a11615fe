// The public user object and the account and auth request bodies.
import { Type, type Static } from 'typebox'
import { ValidationError } from '../errors.js'
import { Nullable, NullableTimestamp, ref, Success, Timestamp } from './common.js'

export const User = Type.Object({
  id: Type.String({ format: 'uuid' }),
  name: Nullable(Type.String()),
  email: Type.String(),
  image: Nullable(Type.String()),
  emailVerified: NullableTimestamp,
  createdAt: Timestamp,
  updatedAt: Timestamp
}, { $id: 'User', description: 'The public user object; the password hash never leaves the database' })
export type User = Static<typeof User>

// Emails are trimmed and lower-cased before storage and lookup, so surrounding blanks are allowed here.
// An address is one mailbox and nothing a mail library could read as more: a dot-atom local
// part (RFC 5322 atext: letters, digits, !#$%&'*+/=?^_`{|}~-, so plus-addressing works)
// and a domain of two or more labels of letters, digits and hyphens. Letters and digits may
// be any script's (internationalized addresses and domains, sent in their Unicode or
// punycode form): none of them separates addresses, where quotes, angle brackets, commas,
// semicolons, parentheses or a second @ would.
// Dot-separated runs that cannot overlap: linear time even on a 1 MiB string. Validation
// runs every keyword, so maxLength does not spare the pattern; an earlier pattern that let
// both sides of the last dot hold dots took minutes on such a string.
const ATEXT = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~\\p{L}\\p{M}\\p{Nd}-]"
const LABEL = '[A-Za-z0-9\\p{L}\\p{M}\\p{Nd}-]'
const EMAIL_PATTERN = `^\\s*${ATEXT}+(?:\\.${ATEXT}+)*@${LABEL}+(?:\\.${LABEL}+)+\\s*$`
const INVALID_EMAIL = 'Invalid email address'
const EMAIL_REGEX = new RegExp(EMAIL_PATTERN, 'u')
/**
 * The rule of EmailAddress for an address that came from elsewhere than a body (an identity
 * provider's claim): one mailbox, at most 255 characters. Give it the normalized address.
 */
export const isAcceptableEmail = (email: string): boolean => email.length <= 255 && EMAIL_REGEX.test(email)
export const EmailAddress = Type.String({
  maxLength: 255,
  pattern: EMAIL_PATTERN,
  errorMessage: INVALID_EMAIL,
  description: 'One mailbox: trimmed and lower-cased before it is stored or looked up',
  examples: ['ada@example.com'],
  $id: 'EmailAddress'
})
// Shared by reference (one pattern in the OpenAPI document, not four). The message is also
// beside the reference, where a missing field's `required` error looks for it.
const Email = () => ({ ...ref(EmailAddress), errorMessage: INVALID_EMAIL }) as unknown as typeof EmailAddress

// bcrypt reads at most 72 bytes; longer passwords are refused, never truncated. The
// byte count is checked in the handler (JSON Schema counts characters).
export const MAX_PASSWORD_BYTES = 72
const TOO_LONG = `Password must be at most ${MAX_PASSWORD_BYTES} bytes`

/** The byte limit JSON Schema cannot state: a 400 naming `field` when `password` is over 72 bytes of UTF-8. */
export function assertPasswordFits (password: string, field: string, code?: 'VALIDATION_FAILED' | 'INVALID_INPUT'): void {
  if (Buffer.byteLength(password, 'utf8') > MAX_PASSWORD_BYTES) throw new ValidationError([`${TOO_LONG} - ${field}`], code)
}
const NewPassword = Type.String({
  minLength: 8,
  maxLength: MAX_PASSWORD_BYTES,
  errorMessage: { minLength: 'Password must be at least 8 characters', maxLength: TOO_LONG },
  examples: ['correct horse battery']
})

export const RegisterBody = Type.Object({
  name: Type.Optional(Type.String({ maxLength: 255, examples: ['Ada Lovelace'] })),
  email: Email(),
  password: NewPassword
}, { $id: 'RegisterBody', additionalProperties: false })
export type RegisterBody = Static<typeof RegisterBody>

export const LoginBody = Type.Object({
  email: Email(),
  password: Type.String({
    minLength: 6,
    maxLength: MAX_PASSWORD_BYTES,
    errorMessage: { required: 'Password must be at least 6 characters', minLength: 'Password must be at least 6 characters', type: 'Password must be at least 6 characters', maxLength: TOO_LONG },
    examples: ['correct horse battery']
  })
}, { $id: 'LoginBody', additionalProperties: false })
export type LoginBody = Static<typeof LoginBody>

// Tokens from email links: any string up to a bound is looked up (by its hash), so a forged
// or mangled one gets the same answer as an expired one.
const EmailLinkToken = Type.String({ minLength: 1, maxLength: 512, description: 'The `token` query parameter of the emailed link', examples: ['Jq4mYw1…'] })

export const ForgotPasswordBody = Type.Object({
  email: Email()
}, { $id: 'ForgotPasswordBody', additionalProperties: false })
export type ForgotPasswordBody = Static<typeof ForgotPasswordBody>

export const ResetPasswordBody = Type.Object({
  token: EmailLinkToken,
  password: NewPassword
}, { $id: 'ResetPasswordBody', additionalProperties: false })
export type ResetPasswordBody = Static<typeof ResetPasswordBody>

export const VerifyEmailBody = Type.Object({
  token: EmailLinkToken
}, { $id: 'VerifyEmailBody', additionalProperties: false })
export type VerifyEmailBody = Static<typeof VerifyEmailBody>

export const DeviceLinkBody = Type.Object({
  email: Email()
}, { $id: 'DeviceLinkBody', additionalProperties: false })
export type DeviceLinkBody = Static<typeof DeviceLinkBody>

export const TrustDeviceBody = Type.Object({
  token: { ...EmailLinkToken, description: 'The `token` query parameter of the emailed sign-in link (APP_URL/trust-device?token=…)' }
}, { $id: 'TrustDeviceBody', additionalProperties: false })
export type TrustDeviceBody = Static<typeof TrustDeviceBody>

export const AuthResponse = Type.Object({
  success: Type.Literal(true),
  token: Type.String({ description: 'JWT (HS256), valid 7 days; also set as the httpOnly cookie `auth_token`' }),
  user: ref(User)
}, { $id: 'AuthResponse', description: 'Signed in: the token and the user' })

export const ProfileUpdateBody = Type.Object({
  name: Type.Optional(Nullable(Type.String({ maxLength: 255 }))),
  image: Type.Optional(Nullable(Type.String({ maxLength: 255, format: 'uri', pattern: '^https?://', errorMessage: { format: 'Must be an http(s) URL', pattern: 'Must be an http(s) URL' } }))),
  email: Type.Optional(Email()),
  currentPassword: Type.Optional(Type.String({ minLength: 1, maxLength: MAX_PASSWORD_BYTES })),
  newPassword: Type.Optional(NewPassword)
}, {
  $id: 'ProfileUpdateBody',
  additionalProperties: false,
  minProperties: 1,
  examples: [{ name: 'Ada King' }, { currentPassword: 'correct horse battery', newPassword: 'even better horse' }]
})
export type ProfileUpdateBody = Static<typeof ProfileUpdateBody>

export const UserResponse = Success(ref(User), { $id: 'UserResponse' })

/** The user object of the profile routes: the user, and the address an email change waits to have confirmed. */
export const Profile = Type.Object({
  ...User.properties,
  pendingEmail: Nullable(Type.String(), 'A new address waiting for its confirmation (the link sent to it): until then `email` signs in and receives mail; null when none')
}, { $id: 'Profile', description: 'The public user object, with an email change waiting for confirmation' })
export type Profile = Static<typeof Profile>

/** GET /account/profile: the profile, never a token. */
export const CurrentProfileResponse = Success(ref(Profile), { $id: 'CurrentProfileResponse' })

export const ProfileResponse = Type.Object({
  success: Type.Literal(true),
  data: ref(Profile),
  token: Type.Optional(Type.String({ description: 'A fresh token, present after a password change (older tokens are revoked)' }))
}, { $id: 'ProfileResponse' })
