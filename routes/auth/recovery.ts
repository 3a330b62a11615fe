// Account recovery and email verification: forgot/reset password, verify an address, send a
// fresh verification link. Registered by routes/auth/index.ts (under /auth); the work is
// the accounts service's (accounts/service.ts).
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { toUser } from '../../db/users.js'
import { clientOf } from '../../plugins/app/sign-in-limits.js'
import { errorResponses, NullSuccess, ref } from '../../schemas/common.js'
import { AuthResponse, ForgotPasswordBody, assertPasswordFits, ResetPasswordBody, UserResponse, VerifyEmailBody } from '../../schemas/users.js'

const Accepted = { ...NullSuccess, description: 'Accepted: the email is queued' }

const recovery: FastifyPluginAsyncTypebox = async (fastify) => {
  const { accounts } = fastify

  fastify.post('/password/forgot', {
    config: { public: true },
    schema: {
      tags: ['auth'],
      operationId: 'forgotPassword',
      summary: 'Email a password reset link',
      description: 'Always 202 with the same body, whether or not the address has an account, after the same work. ' +
        'For an account, queues an email with the link `APP_URL/reset-password?token=…` (valid 1 hour, single use). ' +
        'Limited per client address (429); an address receives at most EMAIL_LINK_MAX_PER_HOUR links an hour (beyond, the same 202 and no mail).',
      body: ref(ForgotPasswordBody),
      response: { 202: Accepted }
    }
  }, async (request, reply) => {
    await accounts.requestPasswordReset(clientOf(request), request.body.email)
    return reply.code(202).send({ success: true as const, data: null })
  })

  fastify.post('/password/reset', {
    config: { public: true },
    schema: {
      tags: ['auth'],
      operationId: 'resetPassword',
      summary: 'Choose a new password with the emailed token, and sign in',
      description: 'The password follows the rules of registration. An unknown, used, expired or superseded token is 400 `RESET_TOKEN_INVALID`. ' +
        'Ends every older session (as a password change does), marks the email verified, queues a "password changed" notice, ' +
        'and signs in like login (sets the `auth_token` cookie). Limited per client address like sign-in.',
      body: ref(ResetPasswordBody),
      response: { 200: ref(AuthResponse) }
    }
  }, async (request, reply) => {
    assertPasswordFits(request.body.password, 'password')
    const { user, deviceCookie } = await accounts.resetPassword(clientOf(request), request.body)
    const token = await fastify.signIn(reply, user, { method: 'password-reset', client: clientOf(request) })
    fastify.rememberDevice(reply, deviceCookie)
    return { success: true as const, token, user: toUser(user) }
  })

  fastify.post('/email/verify', {
    config: { public: true },
    schema: {
      tags: ['auth'],
      operationId: 'verifyEmail',
      summary: 'Confirm the email address with the emailed token',
      description: 'The token from `APP_URL/verify-email?token=…` (valid 48 hours, single use). A token that is unknown, used, expired, ' +
        'or was issued for an address the user no longer has is 400 `VERIFICATION_TOKEN_INVALID`. Limited per client address like sign-in.',
      body: ref(VerifyEmailBody),
      response: { 200: ref(UserResponse) }
    }
  }, async (request) => {
    const user = await accounts.verifyEmail(clientOf(request), request.body.token)
    return { success: true as const, data: toUser(user) }
  })

  fastify.post('/email/verification', {
    schema: {
      tags: ['auth'],
      operationId: 'sendVerificationEmail',
      summary: 'Email a fresh verification link',
      description: 'Queues a verification email to the caller\'s address; 409 `EMAIL_ALREADY_VERIFIED` when it is verified already. ' +
        'Limited per client address (429); an address receives at most EMAIL_LINK_MAX_PER_HOUR links an hour (beyond, the same 202 and no mail).',
      response: { 202: Accepted, ...errorResponses(409) }
    }
  }, async (request, reply) => {
    await accounts.requestVerificationEmail(clientOf(request), request.user)
    return reply.code(202).send({ success: true as const, data: null })
  })
}

export default recovery
