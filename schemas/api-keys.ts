// Personal API keys (docs/api-keys.md, auth-extensions §5).
import { Type, type Static } from 'typebox'
import { Nullable, NullableTimestamp, ref, Timestamp } from './common.js'

export const API_KEY_SCOPES = ['tasks:read', 'tasks:write', 'preferences:read', 'preferences:write'] as const
/** A rotated key keeps working at most a day. */
export const MAX_GRACE_SECONDS = 86_400
/** At most this many keys per report of leaked keys. */
export const MAX_REPORTED_KEYS = 100
/** `tsk_`, 43 base62 characters of random bits, 6 of checksum (accounts/api-keys.ts). */
export const API_KEY_LENGTH = 53

export const ApiKeyScope = Type.Enum([...API_KEY_SCOPES], {
  $id: 'ApiKeyScope',
  type: 'string',
  description: 'What a key may do: read or change the tasks (`/tasks*`), read or change the preferences (`/preferences`). Each operation ' +
    'lists the scopes it needs under the `apiKeyAuth` security scheme; a write scope does not include its read scope'
})
export type ApiKeyScope = Static<typeof ApiKeyScope>

export const ApiKey = Type.Object({
  id: Type.String(),
  name: Type.String(),
  scopes: Type.Array(ref(ApiKeyScope)),
  prefix: Type.String({ description: 'The first 8 characters after `tsk_`: how to tell keys apart (and find one in logs)' }),
  createdAt: Timestamp,
  expiresAt: { ...NullableTimestamp, description: 'When it stops working; null: never' },
  lastUsedAt: { ...NullableTimestamp, description: 'Its last request, to the minute' },
  lastUsedAddress: Nullable(Type.String(), 'The client address of that request'),
  revokesAt: { ...NullableTimestamp, description: 'A rotated key: when its grace ends and it stops working (null otherwise)' }
}, { $id: 'ApiKey', additionalProperties: false })

export const ApiKeyList = Type.Object({
  success: Type.Literal(true),
  data: Type.Array(ref(ApiKey), { description: 'The live keys, newest first (rotated keys still in their grace included); never a key itself' })
}, { $id: 'ApiKeyList' })

export const ApiKeyMade = Type.Object({
  success: Type.Literal(true),
  data: ref(ApiKey),
  key: Type.String({ description: 'The key: `tsk_` and 49 base62 characters. Shown this once and never again (only its hash is kept): store it now' })
}, { $id: 'ApiKeyMade' })

const KeyName = Type.String({ minLength: 1, maxLength: 100, pattern: '\\S', description: 'What the key is for (shown in lists and notices)' })

export const CreateApiKeyBody = Type.Object({
  name: KeyName,
  scopes: Type.Array(ref(ApiKeyScope), { minItems: 1, maxItems: API_KEY_SCOPES.length, uniqueItems: true }),
  expiresAt: Type.Optional(Type.String({ format: 'date-time', description: 'When it stops working: ahead, and at most a year ahead. Omitted: never' }))
}, { $id: 'CreateApiKeyBody', additionalProperties: false })
export type CreateApiKeyBody = Static<typeof CreateApiKeyBody>

export const RotateApiKeyBody = Type.Object({
  graceSeconds: Type.Optional(Type.Integer({
    minimum: 0, maximum: MAX_GRACE_SECONDS, default: 0, description: 'How long the old key keeps working, for the scripts to move to the new one (0: it stops now)'
  }))
}, { $id: 'RotateApiKeyBody', additionalProperties: false })
export type RotateApiKeyBody = Static<typeof RotateApiKeyBody>

export const ApiKeyParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64, description: 'A key\'s id from GET /account/api-keys' }) }, { additionalProperties: false })

export const ReportedKeysBody = Type.Object({
  keys: Type.Array(Type.String({ minLength: 1, maxLength: API_KEY_LENGTH + 16 }), {
    minItems: 1, maxItems: MAX_REPORTED_KEYS, description: `The keys found, up to ${MAX_REPORTED_KEYS}`
  })
}, { $id: 'ReportedKeysBody', additionalProperties: false })
export type ReportedKeysBody = Static<typeof ReportedKeysBody>
