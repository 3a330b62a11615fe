// Preferences JSON and the fields a user may edit, in the origin web client's vocabulary
// (../shared/spec/client-compat.md): notifications as "enabled"/"disabled", the default task
// status under both its names. plan and payment fields are written by the billing code only.
import { Type, type Static } from 'typebox'
import { Nullable, NullableTimestamp, ref, Success } from './common.js'
import { TaskStatus } from './tasks.js'

export const Theme = Type.Enum(['light', 'dark', 'system'], { $id: 'Theme', type: 'string' })
export const Plan = Type.Enum(['free', 'pro'], { $id: 'Plan', type: 'string', description: '`pro` while the subscription is active, trialing or past_due, else `free`' })
export const Toggle = Type.Enum(['enabled', 'disabled'], { $id: 'Toggle', type: 'string' })
export type Toggle = Static<typeof Toggle>

export const Preferences = Type.Object({
  theme: ref(Theme),
  language: Type.String(),
  timezone: Nullable(Type.String({ description: 'IANA time zone, e.g. Europe/Paris; null when not set' })),
  plan: ref(Plan),
  defaultStatus: ref(TaskStatus),
  defaultTaskStatus: ref(TaskStatus, 'The same value as `defaultStatus` (the origin client\'s name)'),
  emailNotifications: ref(Toggle),
  taskReminders: ref(Toggle),
  weeklyDigest: ref(Toggle),
  pushNotifications: ref(Toggle),
  paymentCustomerId: Nullable(Type.String()),
  paymentSubscriptionId: Nullable(Type.String()),
  paymentSubscriptionStatus: Nullable(Type.String()),
  paymentPriceId: Nullable(Type.String()),
  paymentCurrentPeriodEnd: NullableTimestamp
}, { $id: 'Preferences' })
export type Preferences = Static<typeof Preferences>

export const PreferencesResponse = Success(ref(Preferences), { $id: 'PreferencesResponse' })

// One keyword (no `type`: ajv's strict mode refuses a boolean-or-string union), one
// message: `true`/`false` or the client's strings.
const ToggleInput = Type.Unsafe<boolean | Toggle>({
  enum: [true, false, 'enabled', 'disabled'],
  errorMessage: 'Must be "enabled", "disabled", true or false'
})

export const MAX_TIMEZONE_LENGTH = 100

export const UpdatePreferencesBody = Type.Object({
  theme: Type.Optional(ref(Theme)),
  language: Type.Optional(Type.String({ maxLength: 10, pattern: '^[a-z]{2,3}(-[A-Za-z0-9]{2,8})?$', errorMessage: 'Must be a language tag such as en or pt-BR' })),
  timezone: Type.Optional(Nullable(Type.String({ minLength: 1, maxLength: MAX_TIMEZONE_LENGTH, description: 'An IANA time zone name such as Europe/Paris; null clears it' }))),
  defaultStatus: Type.Optional(ref(TaskStatus)),
  defaultTaskStatus: Type.Optional(ref(TaskStatus, 'Another name for `defaultStatus`; when both are sent they must agree')),
  emailNotifications: Type.Optional(ToggleInput),
  taskReminders: Type.Optional(ToggleInput),
  weeklyDigest: Type.Optional(ToggleInput),
  pushNotifications: Type.Optional(ToggleInput)
}, {
  $id: 'UpdatePreferencesBody',
  additionalProperties: false,
  minProperties: 1,
  examples: [
    { theme: 'dark', weeklyDigest: 'enabled' },
    { defaultTaskStatus: 'in-progress', emailNotifications: 'enabled', taskReminders: true, weeklyDigest: 'disabled', theme: 'system', language: 'en', pushNotifications: 'disabled' }
  ]
})
export type UpdatePreferencesBody = Static<typeof UpdatePreferencesBody>
