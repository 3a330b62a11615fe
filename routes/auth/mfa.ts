// The second step of a sign-in for an account with two-step sign-in (docs/second-factor.md):
// the `mfaToken` the first step answered, and a TOTP code or a recovery code. Registered by
// routes/auth/index.ts (under /auth); the work is the door's (accounts/sign-in.ts).
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { clientOf } from '../../client-address.js'
import { ValidationError } from '../../errors.js'
import { errorResponses, ref } from '../../schemas/common.js'
import { MfaBody, MfaSignedIn } from '../../schemas/second-factor.js'

const mfa: FastifyPluginAsyncTypebox = async (fastify) => {
  fastify.post('/mfa', {
    config: { public: true },
    schema: {
      tags: ['auth'],
      operationId: 'completeSecondFactor',
      summary: 'Sign in, second step: a TOTP code or a recovery code',
      description: 'Takes the `mfaToken` that POST /auth/login (or /auth/password/reset, or /auth/providers/exchange) answered with `mfaRequired`, ' +
        'and either `code` (the authenticator app\'s, ±30 s) or `recoveryCode`. Answers like a sign-in (the token, the user, the `auth_token` ' +
        'cookie); after a recovery code also `recoveryCodesLeft`, and the owner is mailed. Each code works once: a code used already, by any ' +
        'request, is 401 `MFA_CODE_INVALID` like a wrong one. An `mfaToken` lives 5 minutes and takes 5 answers; unknown, used, expired or ' +
        'out of tries, or its account\'s password changed since: 401 `MFA_TOKEN_INVALID` (sign in again). Ten wrong answers in a row on an ' +
        'account, over any number of sign-ins, pause its second-factor checks for 15 minutes (429 `RATE_LIMITED` with Retry-After) and mail ' +
        'the owner. Limited per client address like sign-in.',
      body: ref(MfaBody),
      response: { 200: ref(MfaSignedIn), ...errorResponses(401) }
    }
  }, async (request, reply) => {
    const { mfaToken, code, recoveryCode } = request.body
    if ((code === undefined) === (recoveryCode === undefined)) throw new ValidationError(['body must have either code or recoveryCode, not both'])
    const answer = code !== undefined ? { code } : { recoveryCode: recoveryCode! }
    const signedIn = await fastify.signIn.completeSecondFactor(clientOf(request), mfaToken, answer)
    return { success: true as const, ...fastify.answerSignIn(reply, signedIn) }
  })
}

export default mfa
