// The schemas many routes share, registered once by their $id: route schemas reference them
// with ref() (schemas/common.ts), validation and serialization resolve the references, and
// the OpenAPI document lists each once under components.schemas.
import fp from 'fastify-plugin'
import { ApiKey, ApiKeyList, ApiKeyMade, ApiKeyScope, CreateApiKeyBody, ReportedKeysBody, RotateApiKeyBody } from '../schemas/api-keys.js'
import { CheckoutBody, Subscription, SubscriptionDetails, SubscriptionResponse } from '../schemas/billing.js'
import { ErrorCode, ErrorResponse } from '../schemas/common.js'
import { Plan, Preferences, PreferencesResponse, Theme, Toggle, UpdatePreferencesBody } from '../schemas/preferences.js'
import { ExchangeBody, Identity, IdentityList, LinkStarted, ProviderList } from '../schemas/identities.js'
import {
  AuthMethod, OthersEnded, SecurityEvent, SecurityEventList, SecurityEventType, Session, SessionList, SessionMethod, SteppedUp, StepUpBody, StepUpRefusal
} from '../schemas/sessions.js'
import { MfaBody, MfaChallenge, MfaSignedIn, MfaStatus, RecoveryCodes, SignInResponse, TotpCodeBody, TotpConfirmBody, TotpEnrolBody, TotpEnrolment } from '../schemas/second-factor.js'
import { CreateTaskBody, Task, TaskList, TaskResponse, TaskStatus, UpdateTaskBody } from '../schemas/tasks.js'
import {
  AuthResponse, CurrentProfileResponse, DeviceLinkBody, EmailAddress, ForgotPasswordBody, LoginBody, Profile, ProfileResponse, ProfileUpdateBody, RegisterBody, ResetPasswordBody,
  TrustDeviceBody, User, UserResponse, VerifyEmailBody
} from '../schemas/users.js'

// Referenced ones before those that reference them, as ajv resolves them when added.
export const SHARED_SCHEMAS = [
  ErrorCode, ErrorResponse,
  TaskStatus, Task, TaskResponse, TaskList, CreateTaskBody, UpdateTaskBody,
  EmailAddress, User, UserResponse, AuthResponse, Profile, CurrentProfileResponse, ProfileResponse, RegisterBody, LoginBody, ProfileUpdateBody,
  ForgotPasswordBody, ResetPasswordBody, VerifyEmailBody, DeviceLinkBody, TrustDeviceBody,
  Theme, Plan, Toggle, Preferences, PreferencesResponse, UpdatePreferencesBody,
  SubscriptionDetails, Subscription, SubscriptionResponse, CheckoutBody,
  SessionMethod, AuthMethod, Session, SessionList, SecurityEventType, SecurityEvent, SecurityEventList, OthersEnded, StepUpBody, SteppedUp, StepUpRefusal,
  ProviderList, ExchangeBody, LinkStarted, Identity, IdentityList,
  MfaChallenge, SignInResponse, MfaBody, MfaSignedIn, TotpEnrolBody, TotpConfirmBody, TotpCodeBody, TotpEnrolment, RecoveryCodes, MfaStatus,
  ApiKeyScope, ApiKey, ApiKeyList, ApiKeyMade, CreateApiKeyBody, RotateApiKeyBody, ReportedKeysBody
]

export default fp(async function sharedSchemas (fastify) {
  for (const schema of SHARED_SCHEMAS) fastify.addSchema(schema)
}, { name: 'shared-schemas' })
