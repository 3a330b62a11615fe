// Shared schema pieces: envelopes, error bodies, timestamps, and the way a schema is shared.
// A schema with an $id (User, Task, ErrorResponse, …) is registered once (plugins/shared-
// schemas.ts), listed once in the OpenAPI document under components.schemas, and used
// everywhere else through ref(): validation, serialization and the document all follow
// the reference.
import { Type, type Static, type TSchema } from 'typebox'
import { ERROR_CODES } from '../errors.js'

/**
 * `{type: [T, 'null']}` rather than an anyOf: null stays null whatever ajv's coercion
 * settings (an anyOf tries the string branch first and can turn null into ""), errors
 * name one field once, and fast-json-stringify serializes it without branching.
 */
export const Nullable = <T extends TSchema & { type: string }>(schema: T, description?: string) =>
  Type.Unsafe<Static<T> | null>({ ...schema, type: [schema.type, 'null'], ...(description !== undefined && { description }) })

/**
 * The Idempotency-Key request header (plugins/app/idempotency.ts): what Stripe accepts (up to
 * 255 characters), as visible ASCII, so a key is never changed by a header's encoding, trimming
 * or the ", " that joins a repeated header.
 */
export const IdempotencyKey = Type.String({
  minLength: 1,
  maxLength: 255,
  pattern: '^[!-~]+$',
  errorMessage: 'Must be 1 to 255 visible ASCII characters, without spaces',
  description: 'Makes a retry safe: a repeat with the same key and body within 24 hours gets the first answer ' +
    '(`Idempotent-Replayed: true`) instead of running again. A random UUID per operation, for example.',
  examples: ['8e03978e-40d5-43e8-bc93-6894a57f9324']
})

export const Timestamp = Type.String({ format: 'date-time', description: 'ISO-8601 date-time' })
export const NullableTimestamp = Nullable(Timestamp)

function idOf (schema: TSchema): string {
  const id = (schema as { $id?: unknown }).$id
  if (typeof id !== 'string') throw new Error('ref() needs a shared schema, one with an $id')
  return id
}

/** A reference to a shared schema, typed as the schema itself. */
export const ref = <T extends TSchema>(schema: T, description?: string) =>
  Type.Unsafe<Static<T>>({ $ref: idOf(schema), ...(description !== undefined && { description }) })

/** A reference to a shared schema, or null. */
export const nullableRef = <T extends TSchema>(schema: T, description?: string) =>
  Type.Unsafe<Static<T> | null>({ anyOf: [{ $ref: idOf(schema) }, { type: 'null' }], ...(description !== undefined && { description }) })

export const ErrorCode = Type.Enum(ERROR_CODES, {
  $id: 'ErrorCode',
  type: 'string',
  description: 'What went wrong, for programs: a stable identifier to branch on (the `error` text may change)'
})

export const ErrorResponse = Type.Object({
  success: Type.Literal(false),
  error: Type.String({ description: 'What went wrong, for people' }),
  code: ref(ErrorCode),
  details: Type.Optional(Type.Array(Type.String(), { description: 'One `<message> - <field>` line per invalid field' }))
}, { $id: 'ErrorResponse', description: 'Error envelope' })

/** The success envelope around `data`; with an $id, a shared schema. */
export const Success = <T extends TSchema>(data: T, options: { $id?: string, description?: string } = {}) =>
  Type.Object({ success: Type.Literal(true), data }, options)

export const NullSuccess = Success(Type.Null())

/** What an error status means, where a route does not say it in its own words. */
export const ERROR_DESCRIPTIONS = {
  400: 'Validation failed, malformed JSON or a refused field or parameter',
  401: 'Missing, invalid, expired or revoked token, or wrong credentials',
  403: 'Forbidden',
  404: 'Not found',
  409: 'Conflict with the stored state',
  413: 'Payload too large',
  415: 'Unsupported media type',
  422: 'The Idempotency-Key was used for a different request (`IDEMPOTENCY_KEY_REUSED`)',
  429: 'Too many requests (see Retry-After)',
  500: 'Internal server error',
  502: 'Payment provider error',
  503: 'Service unavailable: database unreachable, overloaded (see Retry-After), shutting down, or billing not configured'
} as const

export type ErrorStatus = keyof typeof ERROR_DESCRIPTIONS

/** The error envelope at each of these statuses. */
export function errorResponses (...statuses: ErrorStatus[]) {
  return Object.fromEntries(statuses.map((status) => [status, { ...ref(ErrorResponse), description: ERROR_DESCRIPTIONS[status] }])) as
    unknown as Record<ErrorStatus, ReturnType<typeof ref<typeof ErrorResponse>>>
}
