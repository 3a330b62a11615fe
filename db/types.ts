// Row types of the database, as Kysely sees them. Columns are snake_case; the JSON
// shapes (camelCase) live in schemas/ and are mapped in the repositories.
import type { ColumnType, Generated, GeneratedAlways, Selectable } from 'kysely'
import type { AuthMethod } from '../schemas/sessions.js'
import type { TaskStatus } from '../schemas/tasks.js'

// Read as ISO-8601 strings (db/engine/timestamps.ts); written as a Date or a string.
type Timestamp = ColumnType<string, Date | string | undefined, Date | string>
/** A timestamp without a default: every insert sets it. */
type RequiredTimestamp = ColumnType<string, Date | string, Date | string>
type NullableTimestamp = ColumnType<string | null, Date | string | null | undefined, Date | string | null>

export interface UsersTable {
  id: string
  name: string | null
  email: string
  /** Null for an account made through an identity provider until its owner sets one. */
  password: string | null
  image: string | null
  email_verified: NullableTimestamp
  /** The last password change: tokens issued before it (by `iat`) stop working. */
  password_changed_at: NullableTimestamp
  /**
   * The last change of address: email tokens issued before it are void. Only compared in SQL
   * (db/email-tokens.ts), never read back, so the hot prepared user lookup need not select it.
   */
  email_changed_at: ColumnType<never, Date | string | null | undefined, Date | string | null>
  /**
   * "Sign out everywhere else": tokens without a session row (minted elsewhere with the
   * documented claims) issued before it stop working. Like email_changed_at, only compared.
   */
  other_tokens_ended_at: ColumnType<never, Date | string | null | undefined, Date | string | null>
  /**
   * An email change waiting for the new address to confirm it (docs/security.md), and when it
   * was asked: links sent for it before then are void. Read only by the profile routes and in
   * SQL, never by the hot token lookup.
   */
  pending_email: ColumnType<never, string | null | undefined, string | null>
  pending_email_at: ColumnType<never, Date | string | null | undefined, Date | string | null>
  created_at: Timestamp
  updated_at: Timestamp
}

export interface UserPreferencesTable {
  id: Generated<number>
  user_id: string
  theme: Generated<string>
  language: Generated<string>
  plan: Generated<string>
  default_status: Generated<TaskStatus>
  email_notifications: Generated<boolean>
  task_reminders: Generated<boolean>
  weekly_digest: Generated<boolean>
  push_notifications: Generated<boolean>
  timezone: string | null
  payment_customer_id: string | null
  payment_subscription_id: string | null
  payment_subscription_status: string | null
  payment_price_id: string | null
  payment_current_period_end: NullableTimestamp
  cancel_at_period_end: Generated<boolean>
  /** Provider time of the event that last set the status (billing/rules.ts), and its precedence. */
  payment_state_at: NullableTimestamp
  payment_state_precedence: Generated<number>
  /** The same for the period end, and for the terms (price, cancel_at_period_end). */
  payment_period_end_at: NullableTimestamp
  payment_period_end_precedence: Generated<number>
  payment_terms_at: NullableTimestamp
  payment_terms_precedence: Generated<number>
  /** The checkout session last opened for the user, until it completes (it may have expired). */
  payment_checkout_session_id: string | null
  created_at: Timestamp
  updated_at: Timestamp
}

// The stored subscription as billing/ reads and writes it through db/billing.ts; what an
// event makes of it is decided in billing/rules.ts.

/** When, and by which precedence, a group of fields was last set. */
export interface Version { at: Date, precedence: number }

/** The stored subscription, with the version of each group of fields. */
export interface BillingState {
  subscriptionId: string | null
  status: string | null
  priceId: string | null
  currentPeriodEnd: Date | null
  cancelAtPeriodEnd: boolean
  statusVersion: Version | null
  periodEndVersion: Version | null
  termsVersion: Version | null
}

/** Whose subscription an event is about: the user a checkout names, or the provider customer. */
export type SubscriptionTarget = { userId: string } | { customerId: string }

export interface TasksTable {
  id: Generated<number>
  user_id: string
  title: string
  description: string | null
  status: Generated<TaskStatus>
  due_date: NullableTimestamp
  completed_at: NullableTimestamp
  created_at: Timestamp
  updated_at: Timestamp
  /** The task's JSON as the API writes it, written by a trigger at every insert and update (migration 2026-11-29T06-00-00_task-answers). */
  answer: GeneratedAlways<string>
}

export interface RevokedTokensTable {
  jti: string
  user_id: string
  expires_at: RequiredTimestamp
}

export interface UsageEventsTable {
  id: Generated<string>
  user_id: string
  name: string
  properties: ColumnType<Record<string, unknown>, string, string>
  created_at: Timestamp
}

export interface PaymentEventsTable {
  id: string
  type: string
  provider_created_at: RequiredTimestamp
  received_at: Timestamp
}

/** What a provider action does; billing/provider-actions.ts carries it out. */
export type ProviderActionKind = 'cancel-subscription'
/** Why: a second subscription while one is live, one a checkout replaced before it ended, or a checkout completed for an account that is gone. */
export type ProviderActionReason = 'second-subscription' | 'replaced' | 'account-gone'

export interface BillingProviderActionsTable {
  id: ColumnType<string, never, never>
  kind: ProviderActionKind
  subscription_id: string
  reason: ProviderActionReason
  user_id: string | null
  payment_event_id: string | null
  attempts: Generated<number>
  next_attempt_at: Timestamp
  locked_until: NullableTimestamp
  last_error: string | null
  done_at: NullableTimestamp
  failed_at: NullableTimestamp
  created_at: Timestamp
}

/** `device_link`: the emailed link that lets a device past its account's sign-in lock. */
export type EmailTokenPurpose = 'password_reset' | 'email_verification' | 'device_link'

export interface EmailOutboxTable {
  id: ColumnType<string, never, never>
  user_id: string | null
  kind: string
  recipient: string
  subject: string
  text_body: string | null
  html_body: string | null
  /**
   * A message with a link: the nonce its token is derived from when it is sent (mail/outbox.ts),
   * the bodies being rendered then; without the service's secret it is no link. Blanked once sent.
   */
  link_nonce: string | null
  /** A security notice held back past its address's hourly cap: sent with the others held for it, as one digest. */
  digest: Generated<boolean>
  attempts: Generated<number>
  next_attempt_at: Timestamp
  locked_until: NullableTimestamp
  last_error: string | null
  sent_at: NullableTimestamp
  failed_at: NullableTimestamp
  created_at: Timestamp
}

export interface EmailTokensTable {
  /** SHA-256 (hex) of the token; the token itself is only in the email. */
  token_hash: string
  user_id: string
  purpose: EmailTokenPurpose
  email: string
  expires_at: RequiredTimestamp
  used_at: NullableTimestamp
  created_at: Timestamp
}

export interface IdempotencyKeysTable {
  user_id: string
  /** The client's Idempotency-Key, as sent. */
  key: string
  /** SHA-256 (hex) of the method, the route and the canonical body. */
  request_hash: string
  /** The stored answer; null while a request holds the key, or after one failed. */
  response_status: number | null
  response_body: string | null
  locked_until: NullableTimestamp
  lease_token: string | null
  created_at: Timestamp
}

/** How a session began (docs/sessions.md). */
export type SessionMethod = 'password' | 'registration' | 'password-reset' | 'provider' | 'passkey' | 'external'
export type { AuthMethod }

export interface SessionsTable {
  /** The token's `jti`. */
  id: string
  user_id: string
  method: SessionMethod
  /** The provider's id, for method `provider`. */
  provider: string | null
  address: string | null
  user_agent: string | null
  created_at: Timestamp
  last_seen_at: Timestamp
  expires_at: RequiredTimestamp
  ended_at: NullableTimestamp
  /**
   * The factors its holder proved (AuthMethod), space-separated; null on a row the previous
   * version wrote during a rolling deploy (read as `method` says: db/sessions.ts).
   */
  methods: string | null
  /** When it signed in: for a token signed elsewhere, its `iat`. Written by the app's clock. */
  authenticated_at: Timestamp
  /** Its last step-up (POST /auth/step-up), and with what (AuthMethod). */
  stepped_up_at: NullableTimestamp
  stepped_up_with: string | null
}

export interface UserIdentitiesTable {
  id: string
  user_id: string
  provider: string
  issuer: string
  subject: string
  email: string | null
  /** The account's address when the identity was linked: a confirmation of another address removes it. */
  account_email: string | null
  created_at: Timestamp
}

export interface OidcFlowsTable {
  state_hash: string
  provider: string
  nonce: string
  code_verifier: string
  browser_hash: string
  return_to: string
  link_user_id: string | null
  link_session_id: string | null
  expires_at: RequiredTimestamp
}

export interface SignInCodesTable {
  code_hash: string
  user_id: string
  provider: string
  browser_hash: string
  expires_at: RequiredTimestamp
}

export interface SecurityEventsTable {
  id: ColumnType<string, never, never>
  user_id: string
  type: string
  method: string | null
  provider: string | null
  address: string | null
  user_agent: string | null
  /** The UTC day a failed sign-in counts under (a `date`: both drivers read it as a Date). */
  day: ColumnType<Date, never, never>
  count: Generated<number>
  created_at: Generated<string>
}

/** A user's TOTP factor (auth-extensions §3): pending until its first code confirms it. */
export interface TotpFactorsTable {
  user_id: string
  /** The seed, sealed (accounts/secret-seal.ts): `v1.<key id>.<iv>.<ciphertext>`. */
  secret: string
  /** Null while the enrolment waits for its first code. */
  confirmed_at: NullableTimestamp
  /** The last accepted 30-second step (Unix time / 30): only a later one is accepted. */
  last_step: number | null
  /** Consecutive wrong second-factor answers on the account. */
  failures: Generated<number>
  /** Second-factor checks refused until then (ten failures in a row). */
  suspended_until: NullableTimestamp
  created_at: Timestamp
}

export interface RecoveryCodesTable {
  user_id: string
  /** SHA-256 (hex) of the user's id and the normalised code. */
  code_hash: string
  used_at: NullableTimestamp
  created_at: Timestamp
}

/** A sign-in waiting for its second factor: the `mfaToken`'s hash. */
export interface MfaChallengesTable {
  token_hash: string
  user_id: string
  /** What checked out before it. */
  way: 'password' | 'password-reset' | 'provider'
  provider: string | null
  /** SHA-256 of the password hash it followed ('' for none): a changed password voids it. */
  password_fingerprint: string
  tries_left: number
  expires_at: RequiredTimestamp
  used_at: NullableTimestamp
}

/** A personal API key (auth-extensions §5): its SHA-256 only; the key itself is shown once. */
export interface ApiKeysTable {
  id: string
  user_id: string
  name: string
  /** The first 8 characters after `tsk_`, shown in lists. */
  prefix: string
  /** SHA-256 (hex) of the whole key. */
  key_hash: string
  /** Its scopes, space-separated. */
  scopes: string
  created_at: Timestamp
  expires_at: NullableTimestamp
  /** Written at most once a minute. */
  last_used_at: NullableTimestamp
  last_used_address: string | null
  /** When it stops (stopped) working: in the future while a rotated key's grace runs. */
  revoked_at: NullableTimestamp
  revoked_reason: 'owner' | 'rotated' | 'password-reset' | 'reported' | null
}

/** The WebAuthn user handle of a user (auth-extensions §4): random, made at their first registration. */
export interface PasskeyUsersTable {
  user_id: string
  /** 32 random bytes, base64url. */
  handle: string
}

/** A registered passkey (docs/passkeys.md). */
export interface PasskeysTable {
  id: string
  user_id: string
  name: string
  /** The credential id, base64url: unique across accounts. */
  credential_id: string
  /** The COSE public key, base64url. */
  public_key: string
  /** The last accepted signature counter (bigint: pg reads it as a string, PGlite as a number). */
  counter: ColumnType<string | number, number | undefined, number>
  /** Space-separated, as the browser reported them at registration. */
  transports: ColumnType<string, string | undefined, string>
  /** BE at registration: a synced (multi-device) passkey. Fixed for the credential's life. */
  backup_eligible: boolean
  /** BS as last seen. */
  backed_up: boolean
  aaguid: string | null
  created_at: Timestamp
  last_used_at: NullableTimestamp
}

/**
 * What a challenge was made for. `sign-in-nobody`: a sign-in by an address that is no account's,
 * which no passkey answers (taken as a `sign-in`, so it is refused where another account's is).
 */
export type WebAuthnPurpose = 'registration' | 'sign-in' | 'sign-in-nobody' | 'second-factor' | 'step-up'

/** A ceremony's challenge: its SHA-256 only, 5 minutes, used once. */
export interface WebAuthnChallengesTable {
  challenge_hash: string
  purpose: WebAuthnPurpose
  /** The user it was made for (null: a discoverable sign-in, or `sign-in-nobody`). */
  user_id: string | null
  /** The session it was made for (registration, step-up). */
  session_id: string | null
  /** The `mfaToken` (its SHA-256) a second factor's challenge was made for. */
  mfa_token_hash: string | null
  expires_at: RequiredTimestamp
  used_at: NullableTimestamp
}

export interface Database {
  users: UsersTable
  user_preferences: UserPreferencesTable
  tasks: TasksTable
  revoked_tokens: RevokedTokensTable
  usage_events: UsageEventsTable
  payment_events: PaymentEventsTable
  billing_provider_actions: BillingProviderActionsTable
  email_outbox: EmailOutboxTable
  email_tokens: EmailTokensTable
  idempotency_keys: IdempotencyKeysTable
  sessions: SessionsTable
  user_identities: UserIdentitiesTable
  oidc_flows: OidcFlowsTable
  sign_in_codes: SignInCodesTable
  security_events: SecurityEventsTable
  totp_factors: TotpFactorsTable
  recovery_codes: RecoveryCodesTable
  mfa_challenges: MfaChallengesTable
  api_keys: ApiKeysTable
  passkey_users: PasskeyUsersTable
  passkeys: PasskeysTable
  webauthn_challenges: WebAuthnChallengesTable
}

export type UserRow = Selectable<UsersTable>
export type TaskRow = Selectable<TasksTable>
export type PreferencesRow = Selectable<UserPreferencesTable>
export type SessionRow = Selectable<SessionsTable>
export type IdentityRow = Selectable<UserIdentitiesTable>
export type TotpFactorRow = Selectable<TotpFactorsTable>
export type MfaChallengeRow = Selectable<MfaChallengesTable>
export type SecurityEventRow = Selectable<SecurityEventsTable>
export type ApiKeyRow = Selectable<ApiKeysTable>
export type PasskeyRow = Selectable<PasskeysTable>
export type WebAuthnChallengeRow = Selectable<WebAuthnChallengesTable>
