// The second step of a sign-in for an account with two-step sign-in (docs/second-factor.md):
// the `mfaToken` the first step answered, and a TOTP code, a recovery code or a passkey (presence
// is enough: the password was the other factor). Registered by
// routes/auth/index.ts (under /auth); the work is the door's (accounts/sign-in.ts).
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { AuthenticationResponse } from '../../accounts/passkeys.js'
import type { SecondFactorAnswer } from '../../accounts/second-factor.js'
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
      summary: 'Sign in, second step: a TOTP code, a recovery code or a passkey',
      description: 'Takes the `mfaToken` that POST /auth/login (or /auth/password/reset, or /auth/providers/exchange) answered with `mfaRequired`, ' +
        'and one of `code` (the authenticator app\'s, ±30 s), `recoveryCode`, or `passkey` when `methods` listed it: `credential.toJSON()` ' +
        'for the options POST /auth/passkey/options `{mfaToken}` gave (presence is enough; a passkey of this account only, else 401 ' +
        '`PASSKEY_INVALID`, like a bad signature, another origin, a used challenge or a device-bound counter that did not grow). Answers like a sign-in (the token, the user, the `auth_token` ' +
        'cookie); after a recovery code also `recoveryCodesLeft`, and the owner is mailed. Each code works once: a code used already, by any ' +
        'request, is 401 `MFA_CODE_INVALID` like a wrong one. An `mfaToken` lives 5 minutes and takes 5 answers; unknown, used, expired or ' +
        'out of tries, or its account\'s password changed since: 401 `MFA_TOKEN_INVALID` (sign in again). Ten wrong answers in a row on an ' +
        'account, over any number of sign-ins, pause its second-factor checks for 15 minutes (429 `RATE_LIMITED` with Retry-After) and mail ' +
        'the owner. Limited per client address like sign-in.',
      body: ref(MfaBody),
      response: { 200: ref(MfaSignedIn), ...errorResponses(401) }
    }
  }, async (request, reply) => {
    const { mfaToken, code, recoveryCode, passkey } = request.body
    const given = [code, recoveryCode, passkey].filter((v) => v !== undefined).length
    if (given !== 1) throw new ValidationError(['body must have one of code, recoveryCode or passkey'])
    const answer: SecondFactorAnswer = code !== undefined
      ? { code }
      : passkey !== undefined ? { passkey: passkey as AuthenticationResponse } : { recoveryCode: recoveryCode! }
    const signedIn = await fastify.signIn.completeSecondFactor(clientOf(request), mfaToken, answer)
    return { success: true as const, ...fastify.answerSignIn(reply, signedIn) }
  })
}

export default mfa
