// The error catalog and the validation-detail formatter. Handlers throw these; the one
// error handler in app.ts turns everything into the envelope of decisions.md.
import createError from '@fastify/error'
import type { FastifySchemaValidationError } from 'fastify/types/schema.js'
import type { ErrorMessage } from './common.js'

export const UnauthorizedError = createError('APP_UNAUTHORIZED', 'Unauthorized', 401)
export const ForbiddenError = createError('APP_FORBIDDEN', 'Forbidden', 403)
export const InvalidCredentialsError = createError('APP_INVALID_CREDENTIALS', 'Invalid email or password', 401)
export const EmailTakenError = createError('APP_EMAIL_TAKEN', 'Email already registered', 409)
export const InvalidCurrentPasswordError = createError('APP_INVALID_CURRENT_PASSWORD', 'Invalid current password', 400)
export const TaskNotFoundError = createError('APP_TASK_NOT_FOUND', 'Task not found', 404)
export const PaymentProviderError = createError('APP_PAYMENT_PROVIDER', 'Payment provider error', 502)
export const BillingNotConfiguredError = createError('APP_BILLING_NOT_CONFIGURED', 'Billing is not configured', 503)
export const SubscriptionAlreadyActiveError = createError('APP_SUBSCRIPTION_ACTIVE', 'Subscription already active', 409)
export const NoBillingAccountError = createError('APP_NO_BILLING_ACCOUNT', 'No billing account', 404)
export const NoActiveSubscriptionError = createError('APP_NO_ACTIVE_SUBSCRIPTION', 'No active subscription', 404)
export const InvalidSignatureError = createError('APP_INVALID_SIGNATURE', 'Invalid signature', 400)
export const RateLimitedError = createError('APP_RATE_LIMITED', 'Too many requests', 429)
export const ServiceUnavailableError = createError('APP_SERVICE_UNAVAILABLE', 'Service unavailable', 503)
/** Shed at once because a bounded queue is full (password hashing); answered with Retry-After,
 * as load shedding (plugins/external/under-pressure.ts) answers. */
export const BusyError = createError('APP_BUSY', 'Service unavailable', 503)
export const BUSY_RETRY_AFTER_SECONDS = 5

/** A 400 with `details`, for rules JSON Schema cannot express (e.g. bytes in UTF-8). */
export class ValidationError extends Error {
  readonly statusCode = 400
  readonly code = 'APP_VALIDATION'
  constructor (readonly details: string[], message = 'Validation failed') {
    super(message)
  }
}

/** Application errors whose message is meant for the client. */
export const isAppError = (err: { code?: unknown }): boolean =>
  typeof err.code === 'string' && err.code.startsWith('APP_')

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

/**
 * ajv errors as `<message> - <field>` lines, one per field (the first failure, or the
 * field's own `errorMessage` when one matches).
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
  return [...byField].map(([field, { message }]) => `${message} - ${field}`)
}
