// Sign-in through identity providers, and the identities linked to an account (docs/identity-providers.md).
import { Type, type Static } from 'typebox'
import { Nullable, ref, Timestamp } from './common.js'

export const ProviderId = Type.String({ minLength: 1, maxLength: 32, pattern: '^[a-z][a-z0-9-]*$', description: 'A configured provider\'s id (OIDC_PROVIDERS)' })

export const ProviderList = Type.Object({
  success: Type.Literal(true),
  data: Type.Array(Type.Object({ id: Type.String(), name: Type.String() }, { additionalProperties: false }))
}, { $id: 'ProviderList' })

export const ProviderParams = Type.Object({ id: ProviderId }, { additionalProperties: false })
export const LinkParams = Type.Object({ id: { ...ProviderId, description: 'The provider\'s id (as in GET /auth/providers)' } }, { additionalProperties: false })

export const ReturnTo = Type.String({
  minLength: 1,
  maxLength: 2048,
  description: 'Where the browser lands afterwards: an absolute URL on APP_URL\'s origin or one of CORS_ORIGINS (default APP_URL)'
})

export const StartQuery = Type.Object({ returnTo: Type.Optional(ReturnTo) }, { additionalProperties: false })

// The callback refuses nothing here: every outcome is a redirect with `error=` (accounts/provider-sign-in.ts
// reads the parameters from the URL and judges them). Any id reaches it, so an unknown one is that redirect too.
export const CallbackParams = Type.Object({ id: Type.String({ description: 'The provider\'s id (OIDC_PROVIDERS)' }) }, { additionalProperties: false })

// As the query string arrives: a parameter given twice is a list.
const CallbackParameter = (description: string) => Type.Optional(Type.Union([Type.String(), Type.Array(Type.String())], { description }))

// The provider adds parameters of its own (iss, scope, session_state, authuser, …): accepted, unread.
export const CallbackQuery = Type.Object({
  code: CallbackParameter('The authorization code'),
  state: CallbackParameter('The flow\'s state: anything but exactly one known state is `error=INVALID_STATE`'),
  error: CallbackParameter('The provider\'s refusal (`access_denied`, …): `error=PROVIDER_REJECTED`')
}, { additionalProperties: true })

export const ExchangeBody = Type.Object({
  code: Type.String({ minLength: 1, maxLength: 256, description: 'The `signin` parameter the callback gave the web client (valid 60 s, once)' })
}, { $id: 'ExchangeBody', additionalProperties: false })
export type ExchangeBody = Static<typeof ExchangeBody>

export const LinkStarted = Type.Object({
  success: Type.Literal(true),
  data: Type.Object({ url: Type.String({ description: 'Send the browser here: the provider\'s sign-in page' }) }, { additionalProperties: false })
}, { $id: 'LinkStarted' })

export const Identity = Type.Object({
  id: Type.String(),
  provider: Type.String({ description: 'The provider\'s id' }),
  email: Nullable(Type.String(), 'The email the provider gave when it was linked'),
  createdAt: Timestamp
}, { $id: 'Identity', additionalProperties: false })
export type Identity = Static<typeof Identity>

export const IdentityList = Type.Object({
  success: Type.Literal(true),
  data: Type.Array(ref(Identity))
}, { $id: 'IdentityList' })

export const IdentityParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) }, { additionalProperties: false })
