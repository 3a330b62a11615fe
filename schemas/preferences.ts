// Preferences JSON and the fields a user may edit. plan and payment fields are written
// by the billing code only.
import { Type, type Static } from 'typebox'
import { Nullable, NullableTimestamp } from './common.js'
import { TaskStatus } from './tasks.js'

export const Theme = Type.Enum(['light', 'dark', 'system'], { type: 'string' })

export const Preferences = Type.Object({
  theme: Type.String(),
  language: Type.String(),
  plan: Type.String({ description: '`free` or `pro`' }),
  defaultStatus: TaskStatus,
  emailNotifications: Type.Boolean(),
  taskReminders: Type.Boolean(),
  weeklyDigest: Type.Boolean(),
  paymentCustomerId: Nullable(Type.String()),
  paymentSubscriptionId: Nullable(Type.String()),
  paymentSubscriptionStatus: Nullable(Type.String()),
  paymentPriceId: Nullable(Type.String()),
  paymentCurrentPeriodEnd: NullableTimestamp
})
export type Preferences = Static<typeof Preferences>

export const UpdatePreferencesBody = Type.Object({
  theme: Type.Optional(Theme),
  language: Type.Optional(Type.String({ maxLength: 10, pattern: '^[a-z]{2,3}(-[A-Za-z0-9]{2,8})?$', errorMessage: 'Must be a language tag such as en or pt-BR' })),
  defaultStatus: Type.Optional(TaskStatus),
  emailNotifications: Type.Optional(Type.Boolean()),
  taskReminders: Type.Optional(Type.Boolean()),
  weeklyDigest: Type.Optional(Type.Boolean())
}, { additionalProperties: false, minProperties: 1, examples: [{ theme: 'dark', weeklyDigest: true }] })
export type UpdatePreferencesBody = Static<typeof UpdatePreferencesBody>
