// Sign in with a passkey alone (docs/passkeys.md, auth-extensions §4): options, then the
// browser's answer, which must carry user verification; it is both factors, so the door
// (accounts/sign-in.ts) asks for no second one. The options of a sign-in's second step (POST
// /auth/mfa with `passkey`) come from here too, with its `mfaToken`. Registered by
// routes/auth/index.ts (under /auth); the work is accounts/passkeys.ts's.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { AuthenticationResponse } from '../../accounts/passkeys.js'
import { clientOf } from '../../client-address.js'
import { ValidationError } from '../../errors.js'
import { errorResponses, ref } from '../../schemas/common.js'
import { AuthenticationOptions, PasskeySignInBody, PasskeySignInOptionsBody } from '../../schemas/passkeys.js'
import { AuthResponse } from '../../schemas/users.js'

const passkey: FastifyPluginAsyncTypebox = async (fastify) => {
  fastify.post('/passkey/options', {
    config: { public: true },
    // Every field is optional: a body-less request (or an empty JSON body) is a discoverable sign-in.
    preValidation: async (request) => { request.body ??= {} },
    schema: {
      tags: ['auth'],
      operationId: 'passkeySignInOptions',
      summary: 'Start a passkey sign-in: options for navigator.credentials.get()',
      description: 'For `PublicKeyCredential.parseRequestOptionsFromJSON()`. No field: discoverable (no `allowCredentials`); `email`: that ' +
        'account\'s passkeys (an unknown address gets the same shape, after the same work); both need user verification, for POST ' +
        '/auth/passkey. `mfaToken`: that sign-in\'s account, presence enough, for POST /auth/mfa `{mfaToken, passkey}`; 401 ' +
        '`MFA_TOKEN_INVALID` when unknown, used or expired. Not both (400). Each challenge works once, within 5 minutes. ' +
        'Limited per client address, like sign-in but counted apart from its attempts (429 `RATE_LIMITED`).',
      body: PasskeySignInOptionsBody,
      response: { 200: ref(AuthenticationOptions), ...errorResponses(401) }
    }
  }, async (request) => {
    const { email, mfaToken } = request.body
    if (email !== undefined && mfaToken !== undefined) throw new ValidationError(['body must have email or mfaToken, not both'])
    const client = clientOf(request)
    if (mfaToken !== undefined) {
      const { userId, tokenHash } = await fastify.secondFactor.pendingUser(client, mfaToken)
      return { success: true as const, data: await fastify.passkeys.optionsFor('second-factor', userId, { mfaTokenHash: tokenHash }) }
    }
    return { success: true as const, data: await fastify.passkeys.signInOptions(client, email) }
  })

  fastify.post('/passkey', {
    config: { public: true },
    schema: {
      tags: ['auth'],
      operationId: 'signInWithPasskey',
      summary: 'Sign in with a passkey',
      description: '`response`: `credential.toJSON()` for the options of POST /auth/passkey/options. With user verification it is both ' +
        'factors: the token and cookie, never a second-factor challenge (session method `passkey`). 401 ' +
        '`PASSKEY_USER_VERIFICATION_REQUIRED`: presence only; `PASSKEY_UNKNOWN`: no account has it (`signalUnknownCredential`); ' +
        '`PASSKEY_INVALID`: a bad signature, another origin, a challenge unknown, used or expired, another account\'s passkey, a ' +
        'device-bound counter that did not grow. Limited per client address like sign-in.',
      body: PasskeySignInBody,
      response: { 200: ref(AuthResponse), ...errorResponses(401) }
    }
  }, async (request, reply) => {
    const client = clientOf(request)
    const user = await fastify.passkeys.signIn(client, request.body.response as AuthenticationResponse)
    const answer = fastify.answerSignIn(reply, await fastify.signIn.complete(client, user, { way: 'passkey' }))
    return { success: true as const, ...answer }
  })
}

export default passkey
