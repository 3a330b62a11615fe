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
      description: 'With the account\'s password (a TOTP code and a passkey come with them; a recovery code never counts). Records the step-up on ' +
        'the caller\'s session only: the token stays the same, and no other session of the account is freshened; a token signed elsewhere ' +
        'becomes a session (method `external`). A route marked `x-step-up` answers 403 `STEP_UP_REQUIRED` with `stepUp: {methods, maxAgeSeconds}` ' +
        'when the session signed in or stepped up longer ago than that. A wrong password is 400 `INVALID_CURRENT_PASSWORD` and counts as a failed ' +
        'sign-in of the account (limited and locked like sign-in, 429); an account without a password (made through a provider) is 400 ' +
        '`PASSWORD_NOT_SET`: a new sign-in through the provider is fresh too. Records a `stepped-up` security event and sets the `sign_in_device` cookie.',
      body: ref(StepUpBody),
      response: { 200: ref(SteppedUp) }
    }
  }, async (request, reply) => {
    const done = await fastify.stepUp.withPassword(clientOf(request), request.principal, request.body.password)
    fastify.rememberDevice(reply, done.deviceCookie)
    return { success: true as const, data: { steppedUpAt: done.steppedUpAt.toISOString(), freshUntil: done.freshUntil.toISOString() } }
  })
}

export default stepUp
