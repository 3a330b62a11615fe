// Shared schema pieces: envelopes, error bodies, ids, timestamps. Route schemas compose these.
import { Type, type Static, type TSchema } from 'typebox'
import { ERROR_CODES } from './errors.js'

/**
 * `errorMessage` (our own ajv keyword) replaces the generic validation message for a
 * property: one string for every failure, or one per ajv keyword (`required` included).
 */
export type ErrorMessage = string | Partial<Record<'required' | 'minLength' | 'maxLength' | 'pattern' | 'format' | 'type' | 'enum' | 'minimum' | 'maximum', string>>

/**
 * `{type: [T, 'null']}` rather than an anyOf: null stays null whatever ajv's coercion
 * settings (an anyOf tries the string branch first and can turn null into ""), errors
 * name one field once, and fast-json-stringify serializes it without branching.
 */
export const Nullable = <T extends TSchema & { type: string }>(schema: T, description?: string) =>
  Type.Unsafe<Static<T> | null>({ ...schema, type: [schema.type, 'null'], ...(description !== undefined && { description }) })

export const Timestamp = Type.String({ format: 'date-time', description: 'ISO-8601 date-time' })
export const NullableTimestamp = Nullable(Timestamp)

export const ErrorCode = Type.Enum(ERROR_CODES, {
  type: 'string',
  description: 'What went wrong, for programs: a stable identifier to branch on (the `error` text may change)'
})

export const ErrorResponse = Type.Object({
  success: Type.Literal(false),
  error: Type.String({ description: 'What went wrong, for people' }),
  code: ErrorCode,
  details: Type.Optional(Type.Array(Type.String(), { description: 'One `<message> - <field>` line per invalid field' }))
}, { description: 'Error envelope' })

export const Success = <T extends TSchema>(data: T, description?: string) =>
  Type.Object({ success: Type.Literal(true), data }, description ? { description } : {})

export const NullSuccess = Success(Type.Null())

const errorDescriptions = {
  400: 'Validation failed, malformed JSON or a refused field',
  401: 'Missing, invalid, expired or revoked token',
  403: 'Forbidden',
  404: 'Not found',
  409: 'Conflict with the stored state',
  413: 'Payload too large',
  415: 'Unsupported media type',
  429: 'Too many requests',
  500: 'Internal server error',
  502: 'Payment provider error',
  503: 'Service unavailable (database unreachable, or billing not configured)'
} as const

export type ErrorStatus = keyof typeof errorDescriptions

/** Response schemas for the listed error statuses, plus 500 which any route can answer. */
export function errorResponses (...statuses: ErrorStatus[]) {
  const all = [...new Set<ErrorStatus>([...statuses, 500])]
  return Object.fromEntries(all.map((status) => [status, { ...ErrorResponse, description: errorDescriptions[status] }])) as unknown as Record<ErrorStatus, typeof ErrorResponse>
}

/** The statuses any authenticated route that touches the database can answer. */
export const protectedErrors = [400, 401, 503] as const
