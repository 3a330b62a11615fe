// Sign-up, sign-in, the current user, sign-out; recovery and verification in ./recovery.ts,
// identity providers in ./providers.ts, step-up in ./step-up.ts, the second factor's step in ./mfa.ts,
// passkey sign-in in ./passkey.ts.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { toUser } from '../../db/users.js'
import { clientOf } from '../../client-address.js'
import { errorResponses, NullSuccess, ref } from '../../schemas/common.js'
import { SignInResponse } from '../../schemas/second-factor.js'
import { OthersEnded } from '../../schemas/sessions.js'
import { AuthResponse, LoginBody, assertPasswordFits, RegisterBody, UserResponse } from '../../schemas/users.js'
import mfa from './mfa.js'
import passkey from './passkey.js'
import providers from './providers.js'
import recovery from './recovery.js'
import stepUp from './step-up.js'

const auth: FastifyPluginAsyncTypebox = async (fastify) => {
  const { accounts } = fastify
  await fastify.register(recovery)
  await fastify.register(providers)
  await fastify.register(stepUp)
  await fastify.register(mfa)
  await fastify.register(passkey)

  fastify.post('/register', {
    config: { public: true },
    schema: {
      tags: ['auth'],
      operationId: 'register',
      summary: 'Create an account and sign in',
      description: 'Emails are trimmed and lower-cased. The password is 8 characters to 72 bytes (UTF-8). Sets the `auth_token` cookie. ' +
        'Queues a welcome email with the verification link. ' +
        'Limited per client address and per email like sign-in.',
      body: ref(RegisterBody),
      response: { 201: ref(AuthResponse), ...errorResponses(409) }
    }
  }, async (request, reply) => {
    assertPasswordFits(request.body.password, 'password')
    const client = clientOf(request)
    const { user, deviceCookie } = await accounts.register(client, request.body)
    // The auth cookie first: clients that read one Set-Cookie find the token.
    const answer = fastify.answerSignIn(reply, await fastify.signIn.complete(client, user, { way: 'registration' }))
    fastify.rememberDevice(reply, deviceCookie)
    return reply.code(201).send({ success: true, ...answer })
  })

  fastify.post('/login', {
    config: { public: true, validationCode: 'INVALID_INPUT' },
    schema: {
      tags: ['auth'],
      operationId: 'login',
      summary: 'Sign in',
      description: 'Unknown email and wrong password get the same 401 after the same work. Sets the `auth_token` cookie and a ' +
        '`sign_in_device` cookie that marks this device as one that signed in to the account. ' +
        'AUTH_RATE_LIMIT_MAX attempts per window per client address (an IPv6 /64); an account with that many failed sign-ins ' +
        'from all clients together is locked (429 `ACCOUNT_LOCKED`) for the rest of the window, except on the devices that signed in to it before, ' +
        'and on a device that followed the link POST /auth/device-link emails to the account\'s address. Successful password checks count per ' +
        'account too: past AUTH_RATE_LIMIT_MAX in a window, 429 `RATE_LIMITED`.',
      body: ref(LoginBody),
      response: { 200: ref(SignInResponse), ...errorResponses(401) }
    }
  }, async (request, reply) => {
    assertPasswordFits(request.body.password, 'password', 'INVALID_INPUT')
    const client = clientOf(request)
    const { user, deviceCookie } = await accounts.logIn(client, request.body)
    const answer = fastify.answerSignIn(reply, await fastify.signIn.complete(client, user, { way: 'password' }))
    fastify.rememberDevice(reply, deviceCookie)
    return { success: true as const, ...answer }
  })

  fastify.get('/me', {
    schema: {
      tags: ['auth'],
      operationId: 'getCurrentUser',
      summary: 'The signed-in user',
      response: { 200: ref(UserResponse) }
    }
  }, async (request) => ({ success: true as const, data: toUser(request.user) }))

  fastify.post('/logout', {
    schema: {
      tags: ['auth'],
      operationId: 'logout',
      summary: 'Sign out: revoke the presented token and clear the cookie',
      response: { 200: NullSuccess }
    }
  }, async (request, reply) => {
    await fastify.sessions.signOut(request.user.id, request.principal.session!, clientOf(request))
    fastify.clearAuthCookie(reply)
    return { success: true as const, data: null }
  })

  fastify.post('/logout-others', {
    schema: {
      tags: ['auth'],
      operationId: 'logoutOthers',
      summary: 'Sign out every other session',
      description: 'Ends every session of the caller but the one asking; their tokens are refused (401) from then on, by every instance. ' +
        'Tokens signed elsewhere with the documented claims end too; when the caller\'s own token is one, it becomes a session ' +
        '(method `external`) and stays.',
      response: { 200: ref(OthersEnded) }
    }
  }, async (request) => {
    const ended = await fastify.sessions.endOthers(request.user.id, request.principal.session!, clientOf(request))
    return { success: true as const, data: { ended } }
  })
}

export default auth
