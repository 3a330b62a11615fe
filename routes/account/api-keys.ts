// The caller's personal API keys (docs/api-keys.md, auth-extensions §5): make (shown once),
// list, rotate, revoke. Making and rotating add a way in: they need a recent sign-in or
// step-up (`x-step-up`, §6). Registered by routes/account/index.ts (under /account); the work
// is accounts/api-keys.ts's. The public report of leaked keys: routes/api-keys/index.ts.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { clientOf } from '../../client-address.js'
import { ApiKeyList, ApiKeyMade, ApiKeyParams, CreateApiKeyBody, RotateApiKeyBody } from '../../schemas/api-keys.js'
import { errorResponses, NullSuccess, ref } from '../../schemas/common.js'

const STEP_UP_NOTE = 'Only from a session that signed in or stepped up within STEP_UP_MAX_AGE_S (`x-step-up`; otherwise 403 `STEP_UP_REQUIRED`).'

const apiKeys: FastifyPluginAsyncTypebox = async (fastify) => {
  const { apiKeys } = fastify

  fastify.post('/api-keys', {
    config: { stepUp: true },
    schema: {
      tags: ['account'],
      operationId: 'createApiKey',
      summary: 'Make a personal API key for a script: shown once',
      description: 'Answers the key\'s details and, beside them, `key` itself, which is never shown again (only its hash is kept). The key ' +
        'works as `Authorization: Bearer tsk_…` on the operations whose `apiKeyAuth` security lists its scopes, and nowhere else (403 ' +
        '`INSUFFICIENT_SCOPE` without the scope, 403 `API_KEY_NOT_ALLOWED` on account, sign-in and billing routes). `expiresAt`: ahead, ' +
        'at most a year ahead (400 `VALIDATION_FAILED` otherwise); omitted, it never expires. At most 20 live keys: 409 `API_KEY_LIMIT_REACHED`. ' +
        'Records `api-key-created` and mails a notice. ' + STEP_UP_NOTE,
      body: ref(CreateApiKeyBody),
      response: { 201: ref(ApiKeyMade), ...errorResponses(409) }
    }
  }, async (request, reply) => {
    const made = await apiKeys.create(clientOf(request), request.user, request.body)
    reply.code(201)
    return { success: true as const, data: made.view, key: made.key }
  })

  fastify.get('/api-keys', {
    schema: {
      tags: ['account'],
      operationId: 'listApiKeys',
      summary: 'The account\'s live API keys, with when and from where each was last used',
      response: { 200: ref(ApiKeyList) }
    }
  }, async (request) => ({ success: true as const, data: await apiKeys.list(request.user.id) }))

  fastify.post('/api-keys/:id/rotate', {
    config: { stepUp: true },
    schema: {
      tags: ['account'],
      operationId: 'rotateApiKey',
      summary: 'Replace a key: a new one with the same name, scopes and expiry, shown once',
      description: 'The old key keeps working for `graceSeconds` (0 to 86,400; default 0: it stops now), so the scripts using it can move to the new ' +
        'one; the list shows when (`revokesAt`). A key already rotated, revoked, expired, or not the caller\'s: 404 `API_KEY_NOT_FOUND`. ' +
        'Records `api-key-rotated` and mails a notice. ' + STEP_UP_NOTE,
      params: ApiKeyParams,
      body: ref(RotateApiKeyBody),
      response: { 201: ref(ApiKeyMade), ...errorResponses(404) }
    }
  }, async (request, reply) => {
    const made = await apiKeys.rotate(clientOf(request), request.user, request.params.id, request.body.graceSeconds ?? 0)
    reply.code(201)
    return { success: true as const, data: made.view, key: made.key }
  })

  fastify.delete('/api-keys/:id', {
    schema: {
      tags: ['account'],
      operationId: 'revokeApiKey',
      summary: 'Revoke a key: it stops working at once, on every instance',
      description: 'A rotated key still in its grace stops at once too. Unknown, not the caller\'s, or already dead: 404 `API_KEY_NOT_FOUND`. ' +
        'Records `api-key-revoked` and mails a notice.',
      params: ApiKeyParams,
      response: { 200: NullSuccess, ...errorResponses(404) }
    }
  }, async (request) => {
    await apiKeys.revoke(clientOf(request), request.user, request.params.id)
    return { success: true as const, data: null }
  })
}

export default apiKeys
