// Sessions and the security-events feed (docs/sessions.md).
import { Type, type Static } from 'typebox'
import { ErrorCode, Nullable, NullableTimestamp, ref, Timestamp } from './common.js'
import { AuthenticationResponse } from './passkeys.js'
import { MAX_PASSWORD_BYTES } from './users.js'

export const SessionMethod = Type.Enum(['password', 'registration', 'password-reset', 'provider', 'passkey', 'external'], {
  $id: 'SessionMethod',
  type: 'string',
  description: 'How the session began: a password sign-in, sign-up, a password reset, an identity provider (`provider` names it), a passkey, ' +
    'or `external`: a token signed elsewhere with the documented claims, kept when its holder signed out every other session'
})

export const AuthMethod = Type.Enum(['password', 'totp', 'recovery', 'passkey', 'provider', 'external'], {
  $id: 'AuthMethod',
  type: 'string',
  description: 'A factor a session\'s holder proved: a password, a TOTP code, a recovery code, a passkey, an identity provider\'s sign-in, ' +
    'or `external`: a token signed elsewhere with the documented claims, which says nothing of how'
})
export type AuthMethod = Static<typeof AuthMethod>

export const Session = Type.Object({
  id: Type.String({ description: 'The session\'s id (its token\'s `jti`)' }),
  method: ref(SessionMethod),
  methods: Type.Array(ref(AuthMethod), { description: 'How it was signed in: the factors its holder proved' }),
  provider: Nullable(Type.String(), 'The identity provider\'s id, for method `provider`'),
  createdAt: Timestamp,
  authenticatedAt: { ...Timestamp, description: 'When it signed in (a token signed elsewhere: its `iat`)' },
  steppedUpAt: { ...NullableTimestamp, description: 'Its last step-up (POST /auth/step-up), or null' },
  lastSeenAt: { ...Timestamp, description: 'The last authenticated request, to the minute' },
  address: Nullable(Type.String(), 'The client\'s address at sign-in'),
  userAgent: Nullable(Type.String(), 'The client\'s User-Agent at sign-in, cut to 512 characters'),
  current: Type.Boolean({ description: 'This is the session of the token that asked' })
}, { $id: 'Session', additionalProperties: false })
export type Session = Static<typeof Session>

export const SessionList = Type.Object({
  success: Type.Literal(true),
  data: Type.Array(ref(Session))
}, { $id: 'SessionList' })

export const SessionParams = Type.Object({
  id: Type.String({ minLength: 1, maxLength: 255, description: 'A session id from `GET /account/sessions`' })
}, { additionalProperties: false })

export const SecurityEventType = Type.Enum([
  'sign-in', 'sign-in-failed', 'signed-out', 'session-ended', 'other-sessions-ended', 'password-changed', 'email-change-requested', 'email-changed',
  'identity-linked', 'identity-unlinked', 'device-trusted', 'stepped-up', 'mfa-enabled', 'mfa-disabled', 'recovery-codes-generated',
  'recovery-code-used', 'mfa-suspended', 'passkey-added', 'passkey-removed', 'passkey-counter-rejected', 'api-key-created', 'api-key-rotated',
  'api-key-revoked', 'api-key-reported'
], {
  $id: 'SecurityEventType',
  type: 'string',
  description: 'What happened. `sign-in-failed` is one event per UTC day with its `count`; its time, address and agent are the last failure\'s. ' +
    '`email-change-requested`: a change waits for the new address to confirm it; `email-changed`: it did. `identity-unlinked` with method ' +
    '`email-changed` or `password-reset`: removed because it was linked while the account held another address. `device-trusted`: a device ' +
    'followed the emailed link past a sign-in lock. ' +
    '`stepped-up`: a session proved its holder again (POST /auth/step-up; `method` says with what). ' +
    '`mfa-enabled`, `mfa-disabled`: two-step sign-in (TOTP) turned on or off; `recovery-codes-generated`: a new set, the old void; ' +
    '`recovery-code-used`: one signed in; `mfa-suspended`: ten wrong second-factor answers in a row paused its checks for 15 minutes. ' +
    '`passkey-added`, `passkey-removed`: a passkey registered or removed; `passkey-counter-rejected`: a device-bound passkey answered with a ' +
    'signature counter that did not grow (a cloned authenticator?) and was refused. `api-key-created`, `api-key-rotated`, `api-key-revoked` ' +
    '(`method`: `owner`, `password-reset`), `api-key-reported`: someone who found the key revoked it (POST /api-keys/revoke). ' +
    'A `sign-in-failed` with method `totp` or `recovery` counts wrong second-factor answers'
})

export const SecurityEvent = Type.Object({
  id: Type.String(),
  type: ref(SecurityEventType),
  createdAt: Timestamp,
  method: Nullable(Type.String(), 'For sign-ins: how (as a session\'s `method`)'),
  provider: Nullable(Type.String(), 'The identity provider, for sign-ins through one and for linked or unlinked identities'),
  address: Nullable(Type.String()),
  userAgent: Nullable(Type.String()),
  count: Type.Integer({ minimum: 1, description: 'How many times: above 1 only for `sign-in-failed`' })
}, { $id: 'SecurityEvent', additionalProperties: false })
export type SecurityEvent = Static<typeof SecurityEvent>

export const SecurityEventsQuery = Type.Object({
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 50, description: 'Page size' })),
  before: Type.Optional(Type.String({ pattern: '^[1-9][0-9]{0,17}$', description: 'The events older than this one: the previous page\'s `nextBefore`' }))
}, { additionalProperties: false })
export type SecurityEventsQuery = Static<typeof SecurityEventsQuery>

export const SecurityEventList = Type.Object({
  success: Type.Literal(true),
  data: Type.Array(ref(SecurityEvent)),
  nextBefore: Type.Optional(Type.String({
    description: 'Present only when older events follow: `before` for the next page. Pages are a keyset, so events recorded meanwhile shift nothing'
  }))
}, { $id: 'SecurityEventList' })

export const OthersEnded = Type.Object({
  success: Type.Literal(true),
  data: Type.Object({ ended: Type.Integer({ minimum: 0, description: 'Sessions ended (tokens signed elsewhere end too, uncounted)' }) })
}, { $id: 'OthersEnded' })

/** What POST /auth/step-up takes: the account's password, a TOTP code or a passkey (never a recovery code). */
export const StepUpBody = Type.Union([
  Type.Object({ password: Type.String({ minLength: 1, maxLength: MAX_PASSWORD_BYTES, description: 'The account\'s current password' }) }, { additionalProperties: false }),
  Type.Object({
    code: Type.String({ minLength: 6, maxLength: 16, pattern: '^[0-9 -]+$', description: 'The authenticator app\'s current code (two-step sign-in on)' })
  }, { additionalProperties: false }),
  Type.Object({
    passkey: ref(AuthenticationResponse, '`credential.toJSON()` for the options of POST /auth/step-up/options')
  }, { additionalProperties: false })
], { $id: 'StepUpBody', description: 'The password, a TOTP code, or a passkey' })
export type StepUpBody = Static<typeof StepUpBody>

export const SteppedUp = Type.Object({
  success: Type.Literal(true),
  data: Type.Object({
    steppedUpAt: Timestamp,
    freshUntil: { ...Timestamp, description: 'Until when the routes marked `x-step-up` accept this session without another step-up' }
  })
}, { $id: 'SteppedUp' })

/**
 * The 403 of a route marked `x-step-up` (plugins/app/documented-errors.ts): the error envelope,
 * with `stepUp` when its code is STEP_UP_REQUIRED.
 */
export const StepUpRefusal = Type.Object({
  success: Type.Literal(false),
  error: Type.String({ description: 'What went wrong, for people: sign in again, or step up' }),
  code: ref(ErrorCode),
  stepUp: Type.Optional(Type.Object({
    methods: Type.Array(Type.Enum(['password', 'totp', 'passkey'], { type: 'string' }), {
      description: 'What POST /auth/step-up takes for this account (empty: none; a new sign-in, of any kind, is fresh too)'
    }),
    maxAgeSeconds: Type.Integer({ minimum: 1, description: 'How recent the sign-in or step-up must be (STEP_UP_MAX_AGE_S)' })
  }, { additionalProperties: false }))
}, { $id: 'StepUpRefusal', description: 'Forbidden: with code `STEP_UP_REQUIRED`, the session must step up first (POST /auth/step-up)' })
