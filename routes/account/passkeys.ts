// The caller's passkeys (docs/passkeys.md, auth-extensions §4): register (after a recent sign-in
// or step-up, at its options and at its registration: `x-step-up`), list, rename, remove.
// Registered by routes/account/index.ts (under /account); the work is accounts/passkeys.ts's.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { PasskeyRow } from '../../db/types.js'
import { clientOf } from '../../client-address.js'
import type { RegistrationResponse } from '../../accounts/passkeys.js'
import { errorResponses, NullSuccess, ref } from '../../schemas/common.js'
import {
  PasskeyList, PasskeyParams, PasskeyResponse, RegisterPasskeyBody, RegistrationOptions, RenamePasskeyBody, type Passkey
} from '../../schemas/passkeys.js'

const STEP_UP_NOTE = 'Only from a session that signed in or stepped up within STEP_UP_MAX_AGE_S (`x-step-up`; otherwise 403 `STEP_UP_REQUIRED`).'

const toPasskey = (row: PasskeyRow): Passkey => ({
  id: row.id,
  name: row.name,
  credentialId: row.credential_id,
  synced: row.backed_up,
  deviceBound: !row.backup_eligible,
  createdAt: row.created_at,
  lastUsedAt: row.last_used_at
})

const passkeys: FastifyPluginAsyncTypebox = async (fastify) => {
  fastify.post('/passkeys/options', {
    config: { stepUp: true },
    schema: {
      tags: ['account'],
      operationId: 'passkeyRegistrationOptions',
      summary: 'Start registering a passkey: options for navigator.credentials.create()',
      description: 'For `PublicKeyCredential.parseCreationOptionsFromJSON()`: relying party APP_URL\'s host, user verification required, ' +
        'a discoverable credential preferred, the account\'s passkeys excluded. The challenge works once, for this session, within 5 ' +
        'minutes. 403 `EMAIL_NOT_VERIFIED` while the account\'s address is unconfirmed (it may be someone else\'s, registered to wait ' +
        'for its owner). ' + STEP_UP_NOTE,
      response: { 200: RegistrationOptions }
    }
  }, async (request) => ({ success: true as const, data: await fastify.passkeys.registrationOptions(request.user, request.principal.session!.jti) }))

  fastify.post('/passkeys', {
    config: { stepUp: true },
    schema: {
      tags: ['account'],
      operationId: 'registerPasskey',
      summary: 'Register a passkey: the browser\'s answer to POST /account/passkeys/options',
      description: '`response`: `credential.toJSON()` of what `navigator.credentials.create()` gave. 400 `PASSKEY_REJECTED`: not this ' +
        'session\'s challenge, used or expired, another origin or relying party, or no user verification. 409 `PASSKEY_ALREADY_REGISTERED` when that credential is registered already, ' +
        '`PASSKEY_LIMIT_REACHED` when the account has 50 already. 403 `EMAIL_NOT_VERIFIED` while the account\'s address is unconfirmed. ' +
        'Records `passkey-added`; emails the owner. ' + STEP_UP_NOTE,
      body: RegisterPasskeyBody,
      response: { 201: ref(PasskeyResponse), ...errorResponses(409) }
    }
  }, async (request, reply) => {
    const { name, response } = request.body
    const row = await fastify.passkeys.register(clientOf(request), request.user, request.principal.session!.jti, name.trim(), response as RegistrationResponse)
    return reply.code(201).send({ success: true as const, data: toPasskey(row) })
  })

  fastify.get('/passkeys', {
    schema: {
      tags: ['account'],
      operationId: 'listPasskeys',
      summary: 'The account\'s passkeys',
      description: 'Oldest first. `userHandle` and each `credentialId` are for the Signal API (`signalAllAcceptedCredentials`, docs/passkeys.md).',
      response: { 200: PasskeyList }
    }
  }, async (request) => {
    const { passkeys, userHandle } = await fastify.passkeys.list(request.user.id)
    return { success: true as const, data: passkeys.map(toPasskey), userHandle }
  })

  fastify.patch('/passkeys/:id', {
    schema: {
      tags: ['account'],
      operationId: 'renamePasskey',
      summary: 'Rename a passkey',
      description: 'Another user\'s or an unknown passkey: 404 `PASSKEY_NOT_FOUND`.',
      params: PasskeyParams,
      body: RenamePasskeyBody,
      response: { 200: ref(PasskeyResponse), ...errorResponses(404) }
    }
  }, async (request) => {
    const row = await fastify.passkeys.rename(request.user.id, request.params.id, request.body.name.trim())
    return { success: true as const, data: toPasskey(row) }
  })

  fastify.delete('/passkeys/:id', {
    schema: {
      tags: ['account'],
      operationId: 'deletePasskey',
      summary: 'Remove a passkey',
      description: '409 `LAST_SIGN_IN_METHOD` when the account would have no way in left (no password, linked identity or other passkey). ' +
        'Another user\'s or an unknown passkey: 404 `PASSKEY_NOT_FOUND`. Records `passkey-removed`; emails the owner. Then tell the browser ' +
        '(`signalAllAcceptedCredentials`).',
      params: PasskeyParams,
      response: { 200: NullSuccess, ...errorResponses(404, 409) }
    }
  }, async (request) => {
    await fastify.passkeys.remove(clientOf(request), request.user, request.params.id)
    return { success: true as const, data: null }
  })
}

export default passkeys
