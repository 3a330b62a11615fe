// Passkeys (docs/passkeys.md, auth-extensions §4): what the browser's WebAuthn calls give
// (`PublicKeyCredential.toJSON()`), bounded, and what the routes answer. The shared ones
// (PASSKEY_SCHEMAS, with an $id) are registered by plugins/app/passkeys.ts.
import { Type, type Static } from 'typebox'
import { Nullable, NullableTimestamp, ref, Success, Timestamp } from './common.js'

const Base64Url = (maxLength: number, description?: string) =>
  Type.String({ minLength: 1, maxLength, pattern: '^[A-Za-z0-9_-]+={0,2}$', ...(description !== undefined && { description }) })

/** A credential id: at most 1023 bytes (WebAuthn), as base64url. */
const CredentialId = Base64Url(1400, 'The credential id, base64url')
const Transports = Type.Array(Type.String({ maxLength: 32 }), { maxItems: 8 })
const Attachment = Type.Optional(Type.Enum(['platform', 'cross-platform'], { type: 'string' }))
/** The outputs of the extensions we ask for (credProps at registration), and no others. */
const ExtensionResults = Type.Object({
  credProps: Type.Optional(Type.Object({ rk: Type.Optional(Type.Boolean()) }, { additionalProperties: false }))
}, { additionalProperties: false })

export const PasskeyName = Type.String({ minLength: 1, maxLength: 64, pattern: '\\S', description: 'A name its owner knows it by ("Work laptop")' })

/** `credential.toJSON()` after `navigator.credentials.create()`: an attestation object can be a few KB. */
export const RegistrationResponse = Type.Object({
  id: CredentialId,
  rawId: CredentialId,
  type: Type.Literal('public-key'),
  response: Type.Object({
    clientDataJSON: Base64Url(4096),
    attestationObject: Base64Url(16384),
    authenticatorData: Type.Optional(Base64Url(8192)),
    transports: Type.Optional(Transports),
    publicKeyAlgorithm: Type.Optional(Type.Integer()),
    publicKey: Type.Optional(Base64Url(4096))
  }, { additionalProperties: false }),
  authenticatorAttachment: Attachment,
  clientExtensionResults: ExtensionResults
}, { additionalProperties: false, description: 'What `PublicKeyCredential.toJSON()` gives after `navigator.credentials.create()`' })

/** `credential.toJSON()` after `navigator.credentials.get()`. */
export const AuthenticationResponse = Type.Object({
  id: CredentialId,
  rawId: CredentialId,
  type: Type.Literal('public-key'),
  response: Type.Object({
    clientDataJSON: Base64Url(4096),
    authenticatorData: Base64Url(8192),
    signature: Base64Url(1024),
    userHandle: Type.Optional(Nullable(Base64Url(128), 'The user handle, for a discoverable passkey'))
  }, { additionalProperties: false }),
  authenticatorAttachment: Attachment,
  clientExtensionResults: ExtensionResults
}, { $id: 'PasskeyAssertion', additionalProperties: false, description: 'What `PublicKeyCredential.toJSON()` gives after `navigator.credentials.get()`' })

export const RegisterPasskeyBody = Type.Object({ name: PasskeyName, response: RegistrationResponse }, { additionalProperties: false })
export type RegisterPasskeyBody = Static<typeof RegisterPasskeyBody>
export const RenamePasskeyBody = Type.Object({ name: PasskeyName }, { additionalProperties: false })
export const PasskeyParams = Type.Object({
  id: Type.String({ minLength: 1, maxLength: 255, description: 'A passkey id from `GET /account/passkeys`' })
}, { additionalProperties: false })

export const PasskeySignInOptionsBody = Type.Object({
  email: Type.Optional(Type.String({ minLength: 1, maxLength: 255, description: 'Sign in as this account: its passkeys only (no email: any passkey of this site)' })),
  mfaToken: Type.Optional(Type.String({ minLength: 1, maxLength: 128, description: 'The second step of a sign-in: options for POST /auth/mfa `{mfaToken, passkey}`' }))
}, { additionalProperties: false })
export type PasskeySignInOptionsBody = Static<typeof PasskeySignInOptionsBody>

export const PasskeySignInBody = Type.Object({ response: ref(AuthenticationResponse) }, { additionalProperties: false })

export const Passkey = Type.Object({
  id: Type.String(),
  name: Type.String(),
  credentialId: Type.String({ description: 'For the WebAuthn Signal API' }),
  synced: Type.Boolean({ description: 'Backed up by its provider (on the owner\'s other devices too)' }),
  deviceBound: Type.Boolean({ description: 'Cannot be synced: on one authenticator only' }),
  createdAt: Timestamp,
  lastUsedAt: { ...NullableTimestamp, description: 'Its last sign-in, second factor or step-up, or null' }
}, { $id: 'Passkey', additionalProperties: false })
export type Passkey = Static<typeof Passkey>

export const PasskeyResponse = Success(ref(Passkey), { $id: 'PasskeyResponse' })

export const PasskeyList = Type.Object({
  success: Type.Literal(true),
  data: Type.Array(ref(Passkey)),
  userHandle: Nullable(Type.String(), 'The account\'s WebAuthn user handle (base64url), for the Signal API; null before its first passkey')
})

const Descriptor = Type.Object({
  id: Type.String(),
  type: Type.String(),
  transports: Type.Optional(Type.Array(Type.String()))
}, { $id: 'PasskeyDescriptor' })

/** `PublicKeyCredential.parseCreationOptionsFromJSON()` takes `data` as it is. */
export const RegistrationOptions = Success(Type.Object({
  challenge: Type.String(),
  rp: Type.Object({ name: Type.String(), id: Type.Optional(Type.String()) }),
  user: Type.Object({ id: Type.String({ description: 'The user handle, base64url' }), name: Type.String(), displayName: Type.String() }),
  pubKeyCredParams: Type.Array(Type.Object({ alg: Type.Integer(), type: Type.String() })),
  timeout: Type.Optional(Type.Integer()),
  attestation: Type.Optional(Type.String()),
  excludeCredentials: Type.Optional(Type.Array(ref(Descriptor))),
  // As WebAuthn defines them; the browser reads them, not the client.
  authenticatorSelection: Type.Optional(Type.Object({}, { additionalProperties: true })),
  extensions: Type.Optional(Type.Object({}, { additionalProperties: true })),
  hints: Type.Optional(Type.Array(Type.String()))
}))

/** `PublicKeyCredential.parseRequestOptionsFromJSON()` takes `data` as it is. */
export const AuthenticationOptions = Success(Type.Object({
  challenge: Type.String(),
  rpId: Type.Optional(Type.String()),
  allowCredentials: Type.Optional(Type.Array(ref(Descriptor), { description: 'Absent for a discoverable sign-in' })),
  timeout: Type.Optional(Type.Integer()),
  userVerification: Type.Optional(Type.String())
}), { $id: 'PasskeyRequestOptions' })

/** The shared schemas of this file, referenced ones first. */
export const PASSKEY_SCHEMAS = [AuthenticationResponse, Passkey, PasskeyResponse, Descriptor, AuthenticationOptions]
