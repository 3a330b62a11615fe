// Step-up (docs/sessions.md, auth-extensions §6): the caller's session proves its holder again,
// for the routes marked `x-step-up`. Registered by routes/auth/index.ts (under /auth); the work
// is accounts/step-up.ts's.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { clientOf } from '../../client-address.js'
import { ref } from '../../schemas/common.js'
import { StepUpBody, SteppedUp } from '../../schemas/sessions.js'

const stepUp: FastifyPluginAsyncTypebox = async (fastify) => {
  fastify.post('/step-up', {
    schema: {
      tags: ['auth'],
      operationId: 'stepUp',
      summary: 'Confirm it is you: the routes that add a way in accept this session for the next STEP_UP_MAX_AGE_S',
      description: 'With the account\'s password, or a TOTP code when two-step sign-in is on (a passkey comes with passkeys; a recovery code never ' +
        'counts, and a session that signed in with one steps up only with a code). Records the step-up on ' +
        'the caller\'s session only: the token stays the same, and no other session of the account is freshened; a token signed elsewhere ' +
        'becomes a session (method `external`). A route marked `x-step-up` answers 403 `STEP_UP_REQUIRED` with `stepUp: {methods, maxAgeSeconds}` ' +
        'when the session signed in or stepped up longer ago than that. A wrong password is 400 `INVALID_CURRENT_PASSWORD` and counts as a failed ' +
        'sign-in of the account (limited and locked like sign-in, 429); an account without a password (made through a provider) is 400 ' +
        '`PASSWORD_NOT_SET`: a new sign-in through the provider is fresh too. A wrong or used code is 400 `MFA_CODE_INCORRECT`, counted like a ' +
        'wrong second factor at sign-in (ten in a row: 429 for 15 minutes). Records a `stepped-up` security event; a password also sets the ' +
        '`sign_in_device` cookie.',
      body: ref(StepUpBody),
      response: { 200: ref(SteppedUp) }
    }
  }, async (request, reply) => {
    const client = clientOf(request)
    const { body } = request
    const done = 'code' in body
      ? await fastify.stepUp.withCode(client, request.principal, body.code)
      : await fastify.stepUp.withPassword(client, request.principal, body.password)
    if (done.deviceCookie !== undefined) fastify.rememberDevice(reply, done.deviceCookie)
    return { success: true as const, data: { steppedUpAt: done.steppedUpAt.toISOString(), freshUntil: done.freshUntil.toISOString() } }
  })
}

export default stepUp
