// The error catalog and the validation-detail formatter. Handlers throw these; the one
// error handler (plugins/errors.ts) turns everything into the envelope of docs/api.md.
import createError from '@fastify/error'
import type { FastifySchemaValidationError } from 'fastify/types/schema.js'

/**
 * Every failure the service answers, by its stable `code` (what programs branch on; the
 * `error` text is for people and may change). The OpenAPI document lists these codes as an
 * enum; one code per distinct condition.
 */
export const ERROR_CATALOG = {
  VALIDATION_FAILED: [400, 'Validation failed'],
  INVALID_INPUT: [400, 'Invalid input'],
  INVALID_JSON: [400, 'Invalid JSON body'],
  INVALID_CURRENT_PASSWORD: [400, 'Invalid current password'],
  CURRENT_PASSWORD_REQUIRED: [400, 'The current password is required to change the email address'],
  INVALID_SIGNATURE: [400, 'Invalid signature'],
  BAD_REQUEST: [400, 'Bad request'],
  RESET_TOKEN_INVALID: [400, 'This password reset link is invalid or has expired'],
  DEVICE_LINK_INVALID: [400, 'This sign-in link is invalid or has expired'],
  VERIFICATION_TOKEN_INVALID: [400, 'This verification link is invalid or has expired'],
  PASSWORD_NOT_SET: [400, 'This account has no password: set one through the password reset'],
  SIGN_IN_CODE_INVALID: [400, 'This sign-in code is invalid or has expired'],
  PASSKEY_REJECTED: [400, 'This passkey answer did not check out (a passkey that verifies you, on this site, for this request): try again'],
  MFA_CODE_INCORRECT: [400, 'This code is wrong, or was used already: wait for the next one'],
  UNAUTHORIZED: [401, 'Unauthorized'],
  INVALID_CREDENTIALS: [401, 'Invalid email or password'],
  MFA_CODE_INVALID: [401, 'This code is wrong, or was used already'],
  MFA_TOKEN_INVALID: [401, 'This sign-in is invalid or has expired: sign in again'],
  PASSKEY_UNKNOWN: [401, 'This passkey is not registered with any account'],
  PASSKEY_USER_VERIFICATION_REQUIRED: [401, 'This passkey did not verify who is using it (a PIN or biometric): it cannot sign in alone'],
  PASSKEY_INVALID: [401, 'This passkey answer did not check out: try again'],
  FORBIDDEN: [403, 'Forbidden'],
  STEP_UP_REQUIRED: [403, 'Confirm it is you first: step up (POST /auth/step-up) or sign in again'],
  INSUFFICIENT_SCOPE: [403, 'This credential may not do this'],
  API_KEY_NOT_ALLOWED: [403, 'API keys cannot be used here: sign in'],
  EMAIL_NOT_VERIFIED: [403, 'Verify your email address first'],
  NOT_FOUND: [404, 'Not found'],
  TASK_NOT_FOUND: [404, 'Task not found'],
  NO_STRIPE_CUSTOMER: [404, 'No billing account'],
  NO_ACTIVE_SUBSCRIPTION: [404, 'No active subscription'],
  PROVIDER_NOT_FOUND: [404, 'No such identity provider'],
  SESSION_NOT_FOUND: [404, 'Session not found'],
  IDENTITY_NOT_FOUND: [404, 'Identity not found'],
  PASSKEY_NOT_FOUND: [404, 'Passkey not found'],
  API_KEY_NOT_FOUND: [404, 'API key not found'],
  EMAIL_TAKEN: [409, 'Email already registered'],
  EMAIL_ALREADY_VERIFIED: [409, 'Email already verified'],
  PASSWORD_CHANGE_CONFLICT: [409, 'The password was changed by another request'],
  SUBSCRIPTION_ALREADY_ACTIVE: [409, 'Subscription already active'],
  IDEMPOTENCY_KEY_IN_USE: [409, 'A request with this Idempotency-Key is still running'],
  LAST_SIGN_IN_METHOD: [409, 'This is the account\'s last way to sign in'],
  MFA_ALREADY_ENABLED: [409, 'Two-step sign-in is on already: turn it off first'],
  MFA_NOT_ENABLED: [409, 'Two-step sign-in is not on'],
  MFA_NOT_PENDING: [409, 'No enrolment waits for its code: start one first (POST /account/mfa/totp)'],
  PASSKEY_ALREADY_REGISTERED: [409, 'This passkey is registered already'],
  PASSKEY_LIMIT_REACHED: [409, 'An account has at most 50 passkeys: remove one first'],
  API_KEY_LIMIT_REACHED: [409, 'An account has at most 20 live API keys: revoke one first'],
  PAYLOAD_TOO_LARGE: [413, 'Payload too large'],
  UNSUPPORTED_MEDIA_TYPE: [415, 'Unsupported media type'],
  IDEMPOTENCY_KEY_REUSED: [422, 'This Idempotency-Key was used for a different request'],
  // Refused by the HTTP layer before any route runs (plugins/errors.ts, clientErrorHandler and frameworkErrors).
  REQUEST_TIMEOUT: [408, 'Request timeout'],
  URI_TOO_LONG: [414, 'URI too long'],
  HEADERS_TOO_LARGE: [431, 'Request headers too large'],
  RATE_LIMITED: [429, 'Too many requests'],
  ACCOUNT_LOCKED: [429, 'Too many failed sign-ins to this account: sign in from a device you used before, or ask for a sign-in link by email'],
  INTERNAL_ERROR: [500, 'Internal server error'],
  PAYMENT_PROVIDER_ERROR: [502, 'Payment provider error'],
  SERVICE_UNAVAILABLE: [503, 'Service unavailable'],
  OVERLOADED: [503, 'Service unavailable'],
  BILLING_NOT_CONFIGURED: [503, 'Billing is not configured'],
  MFA_NOT_CONFIGURED: [503, 'Two-step sign-in is not configured on this server']
} as const satisfies Record<string, readonly [number, string]>

export type ErrorCode = keyof typeof ERROR_CATALOG
export const ERROR_CODES = Object.keys(ERROR_CATALOG) as ErrorCode[]

export interface ErrorBody { success: false, error: string, code: ErrorCode, details?: string[], stepUp?: StepUpChallenge }

/** What a STEP_UP_REQUIRED answer says the session can do about it (auth-extensions §6). */
export interface StepUpChallenge { methods: string[], maxAgeSeconds: number }

/** The error envelope: the one place it is built. */
export function errorBody (code: ErrorCode, details?: string[], extra?: { stepUp?: StepUpChallenge }): ErrorBody {
  const error = ERROR_CATALOG[code][1]
  const body: ErrorBody = details === undefined ? { success: false, error, code } : { success: false, error, code, details }
  return extra?.stepUp === undefined ? body : { ...body, stepUp: extra.stepUp }
}

const appError = (code: ErrorCode) => createError(code, ERROR_CATALOG[code][1], ERROR_CATALOG[code][0])

export const UnauthorizedError = appError('UNAUTHORIZED')
export const ForbiddenError = appError('FORBIDDEN')
export const InvalidCredentialsError = appError('INVALID_CREDENTIALS')
export const EmailTakenError = appError('EMAIL_TAKEN')
export const InvalidCurrentPasswordError = appError('INVALID_CURRENT_PASSWORD')
export const CurrentPasswordRequiredError = appError('CURRENT_PASSWORD_REQUIRED')
export const PasswordChangeConflictError = appError('PASSWORD_CHANGE_CONFLICT')
export const ResetTokenInvalidError = appError('RESET_TOKEN_INVALID')
export const VerificationTokenInvalidError = appError('VERIFICATION_TOKEN_INVALID')
export const EmailAlreadyVerifiedError = appError('EMAIL_ALREADY_VERIFIED')
export const PasswordNotSetError = appError('PASSWORD_NOT_SET')
export const StepUpRequiredError = appError('STEP_UP_REQUIRED')
export const InsufficientScopeError = appError('INSUFFICIENT_SCOPE')
export const ApiKeyNotAllowedError = appError('API_KEY_NOT_ALLOWED')
export const ApiKeyNotFoundError = appError('API_KEY_NOT_FOUND')
export const ApiKeyLimitReachedError = appError('API_KEY_LIMIT_REACHED')
export const PasskeyUnknownError = appError('PASSKEY_UNKNOWN')
export const PasskeyUserVerificationRequiredError = appError('PASSKEY_USER_VERIFICATION_REQUIRED')
export const PasskeyInvalidError = appError('PASSKEY_INVALID')
export const PasskeyNotFoundError = appError('PASSKEY_NOT_FOUND')
export const PasskeyAlreadyRegisteredError = appError('PASSKEY_ALREADY_REGISTERED')
export const PasskeyRejectedError = appError('PASSKEY_REJECTED')
export const PasskeyLimitReachedError = appError('PASSKEY_LIMIT_REACHED')
export const EmailNotVerifiedError = appError('EMAIL_NOT_VERIFIED')
export const SignInCodeInvalidError = appError('SIGN_IN_CODE_INVALID')
export const MfaCodeIncorrectError = appError('MFA_CODE_INCORRECT')
export const MfaCodeInvalidError = appError('MFA_CODE_INVALID')
export const MfaTokenInvalidError = appError('MFA_TOKEN_INVALID')
export const MfaAlreadyEnabledError = appError('MFA_ALREADY_ENABLED')
export const MfaNotEnabledError = appError('MFA_NOT_ENABLED')
export const MfaNotPendingError = appError('MFA_NOT_PENDING')
export const MfaNotConfiguredError = appError('MFA_NOT_CONFIGURED')
export const ProviderNotFoundError = appError('PROVIDER_NOT_FOUND')
export const SessionNotFoundError = appError('SESSION_NOT_FOUND')
export const IdentityNotFoundError = appError('IDENTITY_NOT_FOUND')
export const LastSignInMethodError = appError('LAST_SIGN_IN_METHOD')
export const TaskNotFoundError = appError('TASK_NOT_FOUND')
export const PaymentProviderError = appError('PAYMENT_PROVIDER_ERROR')
export const BillingNotConfiguredError = appError('BILLING_NOT_CONFIGURED')
export const SubscriptionAlreadyActiveError = appError('SUBSCRIPTION_ALREADY_ACTIVE')
export const NoBillingAccountError = appError('NO_STRIPE_CUSTOMER')
export const NoActiveSubscriptionError = appError('NO_ACTIVE_SUBSCRIPTION')
export const InvalidSignatureError = appError('INVALID_SIGNATURE')
export const IdempotencyKeyInUseError = appError('IDEMPOTENCY_KEY_IN_USE')
export const IdempotencyKeyReusedError = appError('IDEMPOTENCY_KEY_REUSED')
export const RateLimitedError = appError('RATE_LIMITED')
export const AccountLockedError = appError('ACCOUNT_LOCKED')
export const DeviceLinkInvalidError = appError('DEVICE_LINK_INVALID')
export const ServiceUnavailableError = appError('SERVICE_UNAVAILABLE')
/** Shed at once because the service is overloaded (a bounded queue is full, or the event
 * loop lags); answered with Retry-After. */
export const BusyError = appError('OVERLOADED')
export const BUSY_RETRY_AFTER_SECONDS = 5

/** 429 with the seconds after which to try again (the error handler sends Retry-After). */
export const rateLimited = (retryAfterSeconds: number): Error & { retryAfter: number } =>
  Object.assign(new RateLimitedError(), { retryAfter: Math.max(1, Math.ceil(retryAfterSeconds)) })

/** 429 ACCOUNT_LOCKED: failed sign-ins locked the account for devices that never signed in to it (Retry-After as rateLimited). */
export const accountLocked = (retryAfterSeconds: number): Error & { retryAfter: number } =>
  Object.assign(new AccountLockedError(), { retryAfter: Math.max(1, Math.ceil(retryAfterSeconds)) })

/** 403 STEP_UP_REQUIRED with what the session can step up with (the error handler adds it to the envelope as `stepUp`). */
export const stepUpRequired = (stepUp: StepUpChallenge): Error & { stepUp: StepUpChallenge } =>
  Object.assign(new StepUpRequiredError(), { stepUp })

/** A 400 with `details`, for rules JSON Schema cannot express (e.g. bytes in UTF-8). */
export class ValidationError extends Error {
  readonly statusCode = 400
  constructor (readonly details: string[], readonly code: 'VALIDATION_FAILED' | 'INVALID_INPUT' = 'VALIDATION_FAILED') {
    super(ERROR_CATALOG[code][1])
  }
}

/**
 * The service refuses to start, and its message says why in one line (server.ts prints it, not
 * a stack): a refusal, not a fault, like a bad setting (ConfigError). The embedded database's
 * lock (DataDirInUseError) and the checks of the way to PostgreSQL (DatabaseSetupError) throw
 * one, so the entry tells them apart without knowing the engine.
 */
export class StartRefusal extends Error {}

/** The most of any one text an error's log line carries (server-options.ts); also what a mail's recorded error and a span attribute keep. */
export const MAX_LOGGED_TEXT = 2048

/** Application errors: their code is one of the catalog's, and their message is meant for the client. */
export const isAppError = (err: { code?: unknown }): err is { code: ErrorCode } =>
  typeof err.code === 'string' && Object.hasOwn(ERROR_CATALOG, err.code)

/**
 * `errorMessage` (our own ajv keyword, set on the schemas of schemas/) replaces the generic
 * validation message for a property: one string for every failure, or one per ajv keyword
 * (`required` included).
 */
type ErrorMessage = string | Partial<Record<'required' | 'minLength' | 'maxLength' | 'pattern' | 'format' | 'type' | 'enum' | 'minimum' | 'maximum', string>>

type VerboseError = FastifySchemaValidationError & {
  parentSchema?: { errorMessage?: ErrorMessage, properties?: Record<string, { errorMessage?: ErrorMessage }> }
}

const article = (word: string) => /^[aeiou]/.test(word) ? `an ${word}` : `a ${word}`
const capitalize = (word: string) => word.charAt(0).toUpperCase() + word.slice(1)

function customMessage (errorMessage: ErrorMessage | undefined, keyword: string): string | undefined {
  if (errorMessage === undefined) return undefined
  return typeof errorMessage === 'string' ? errorMessage : errorMessage[keyword as keyof typeof errorMessage]
}

function genericMessage (error: VerboseError, field: string): string {
  const p = error.params as Record<string, unknown>
  switch (error.keyword) {
    case 'required': return `${capitalize(field.split('.').at(-1) ?? field)} is required`
    case 'additionalProperties': return 'Unknown field'
    case 'type': return `Must be ${article(String(p.type).replace(',', ' or '))}`
    case 'enum': return `Must be one of: ${(p.allowedValues as unknown[]).join(', ')}`
    case 'minLength': return p.limit === 1 ? 'Must not be empty' : `Must be at least ${String(p.limit)} characters`
    case 'maxLength': return `Must be at most ${String(p.limit)} characters`
    case 'minimum': return `Must be at least ${String(p.limit)}`
    case 'maximum': return `Must be at most ${String(p.limit)}`
    case 'minProperties': return 'At least one field is required'
    case 'format': return `Must be a valid ${String(p.format)}`
    case 'pattern': return 'Has an invalid format'
    case 'minItems': return `Must have at least ${String(p.limit)} items`
    case 'maxItems': return `Must have at most ${String(p.limit)} items`
    default: return 'Is invalid'
  }
}

/** Enough for any real form; a body of many thousand unknown fields gets no echo of each. */
export const MAX_DETAILS = 20

/**
 * ajv errors as `<message> - <field>` lines, one per field (the first failure, or the
 * field's own `errorMessage` when one matches), at most MAX_DETAILS of them.
 */
export function formatValidationDetails (errors: FastifySchemaValidationError[], context = 'body'): string[] {
  const byField = new Map<string, { message: string, custom: boolean }>()
  for (const raw of errors as VerboseError[]) {
    const p = raw.params as Record<string, unknown>
    const path = raw.instancePath.replace(/^\//, '').replaceAll('/', '.')
    let field = path || context
    let custom: string | undefined
    if (raw.keyword === 'required') {
      const missing = String(p.missingProperty)
      field = path ? `${path}.${missing}` : missing
      custom = customMessage(raw.parentSchema?.properties?.[missing]?.errorMessage, 'required')
    } else if (raw.keyword === 'additionalProperties') {
      const extra = String(p.additionalProperty)
      field = path ? `${path}.${extra}` : extra
    } else {
      custom = customMessage(raw.parentSchema?.errorMessage, raw.keyword)
    }
    const seen = byField.get(field)
    if (seen && (seen.custom || custom === undefined)) continue
    byField.set(field, { message: custom ?? genericMessage(raw, field), custom: custom !== undefined })
  }
  return [...byField].slice(0, MAX_DETAILS).map(([field, { message }]) => `${message} - ${field}`)
}
