// Step-up (docs/sessions.md, auth-extensions §6): the caller's session proves its holder again
// (a password, a TOTP code, a passkey after its options), for the routes marked `x-step-up`. Registered by routes/auth/index.ts (under /auth); the work
// is accounts/step-up.ts's.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { AuthenticationResponse } from '../../accounts/passkeys.js'
import { clientOf } from '../../client-address.js'
import { ref } from '../../schemas/common.js'
import { AuthenticationOptions } from '../../schemas/passkeys.js'
import { StepUpBody, SteppedUp } from '../../schemas/sessions.js'

const stepUp: FastifyPluginAsyncTypebox = async (fastify) => {
  fastify.post('/step-up', {
    schema: {
      tags: ['auth'],
      operationId: 'stepUp',
      summary: 'Confirm it is you: the routes that add a way in accept this session for the next STEP_UP_MAX_AGE_S',
      description: 'With the account\'s password, a TOTP code when two-step sign-in is on, or one of the account\'s passkeys (`passkey`: ' +
        '`credential.toJSON()` for the options of POST /auth/step-up/options; presence is enough). A recovery code never counts, and a ' +
        'session that signed in with one steps up only with a code or a passkey. Records the step-up on ' +
        'the caller\'s session only: the token stays the same, and no other session of the account is freshened; a token signed elsewhere ' +
        'becomes a session (method `external`). A route marked `x-step-up` answers 403 `STEP_UP_REQUIRED` with `stepUp: {methods, maxAgeSeconds}` ' +
        'when the session signed in or stepped up longer ago than that. A wrong password is 400 `INVALID_CURRENT_PASSWORD` and counts as a failed ' +
        'sign-in of the account (limited and locked like sign-in, 429); an account without a password (made through a provider) is 400 ' +
        '`PASSWORD_NOT_SET`: a new sign-in through the provider is fresh too. A wrong or used code is 400 `MFA_CODE_INCORRECT`, counted like a ' +
        'wrong second factor at sign-in (ten in a row: 429 for 15 minutes). A passkey that does not check out (not this account\'s, a ' +
        'challenge not made for this session, used or expired, another origin, a bad signature, a device-bound counter that did not grow) is ' +
        '400 `PASSKEY_REJECTED`, counted as a failed sign-in of the account. Records a `stepped-up` security event; a password also sets the ' +
        '`sign_in_device` cookie.',
      body: ref(StepUpBody),
      response: { 200: ref(SteppedUp) }
    }
  }, async (request, reply) => {
    const client = clientOf(request)
    const { body } = request
    const done = 'code' in body
      ? await fastify.stepUp.withCode(client, request.principal, body.code)
      : 'passkey' in body
        ? await fastify.stepUp.withPasskey(client, request.principal, body.passkey as AuthenticationResponse)
        : await fastify.stepUp.withPassword(client, request.principal, body.password)
    if (done.deviceCookie !== undefined) fastify.rememberDevice(reply, done.deviceCookie)
    return { success: true as const, data: { steppedUpAt: done.steppedUpAt.toISOString(), freshUntil: done.freshUntil.toISOString() } }
  })

  fastify.post('/step-up/options', {
    schema: {
      tags: ['auth'],
      operationId: 'stepUpOptions',
      summary: 'Start a step-up with a passkey: options for navigator.credentials.get()',
      description: 'Answers the options for `PublicKeyCredential.parseRequestOptionsFromJSON()`: the account\'s passkeys, presence enough. ' +
        'Its challenge works once, for this session only, within 5 minutes: pass what the browser gives to POST /auth/step-up as `passkey`. ' +
        'A credential that is no session (an API key) is 403 `FORBIDDEN`.',
      response: { 200: ref(AuthenticationOptions) }
    }
  }, async (request) => ({ success: true as const, data: await fastify.stepUp.passkeyOptions(request.principal) }))
}

export default stepUp
