// Account recovery and email verification: forgot/reset password, verify an address, send a
// fresh verification link, and the emailed link that lets a device past a sign-in lock. Registered by routes/auth/index.ts (under /auth); the work is
// the accounts service's (accounts/service.ts).
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { toUser } from '../../db/users.js'
import { clientOf } from '../../client-address.js'
import { errorResponses, NullSuccess, ref } from '../../schemas/common.js'
import { SignInResponse } from '../../schemas/second-factor.js'
import {
  DeviceLinkBody, ForgotPasswordBody, assertPasswordFits, ResetPasswordBody, TrustDeviceBody, UserResponse, VerifyEmailBody
} from '../../schemas/users.js'

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
        'Limited per client address (429); an address receives at most EMAIL_LINK_MAX_PER_HOUR mails an hour (beyond, the same 202 and no mail). ' +
        'The mail names the identity providers that will still sign in to the account after the reset.',
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
        'Ends every older session (as a password change does), marks the email verified, cancels an email change waiting for confirmation, ' +
        'removes the identity providers linked while the account held another address, queues a "password changed" notice naming those still linked, ' +
        'and signs in like login (sets the `auth_token` cookie). Limited per client address like sign-in.',
      body: ref(ResetPasswordBody),
      response: { 200: ref(SignInResponse) }
    }
  }, async (request, reply) => {
    assertPasswordFits(request.body.password, 'password')
    const client = clientOf(request)
    const { user, deviceCookie } = await accounts.resetPassword(client, request.body)
    const answer = fastify.answerSignIn(reply, await fastify.signIn.complete(client, user, { way: 'password-reset' }))
    fastify.rememberDevice(reply, deviceCookie)
    return { success: true as const, ...answer }
  })

  fastify.post('/email/verify', {
    config: { public: true },
    schema: {
      tags: ['auth'],
      operationId: 'verifyEmail',
      summary: 'Confirm the email address with the emailed token',
      description: 'The token from `APP_URL/verify-email?token=…` (valid 48 hours, single use). A token that is unknown, used, expired, ' +
        'or was issued for an address the user no longer has is 400 `VERIFICATION_TOKEN_INVALID`. A link sent to the address an email change waits for ' +
        'applies the change: that address becomes the account\'s, verified; the old one is told, and the identity providers linked while the account ' +
        'held another address are removed. 409 `EMAIL_TAKEN` when another account took that address meanwhile (the change is dropped). ' +
        'Limited per client address like sign-in.',
      body: ref(VerifyEmailBody),
      response: { 200: ref(UserResponse), ...errorResponses(409) }
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
        'Limited per client address (429); an address receives at most EMAIL_LINK_MAX_PER_HOUR mails an hour (beyond, the same 202 and no mail).',
      response: { 202: Accepted, ...errorResponses(409) }
    }
  }, async (request, reply) => {
    await accounts.requestVerificationEmail(clientOf(request), request.user)
    return reply.code(202).send({ success: true as const, data: null })
  })

  fastify.post('/device-link', {
    config: { public: true },
    schema: {
      tags: ['auth'],
      operationId: 'requestDeviceLink',
      summary: 'Email a link that lets this device sign in to a locked account',
      description: 'For the answer 429 `ACCOUNT_LOCKED` (too many failed sign-ins to the account, from devices that never signed in to it). ' +
        'Always 202 with the same body, whether or not the address has an account, after the same work (as `forgot`). For an account, queues ' +
        'an email with the link `APP_URL/trust-device?token=…` (valid 1 hour, single use) for POST /auth/device-link/confirm. Limited per client ' +
        'address (429); counted against the address\'s EMAIL_LINK_MAX_PER_HOUR mails an hour (beyond, the same 202 and no mail).',
      body: ref(DeviceLinkBody),
      response: { 202: Accepted }
    }
  }, async (request, reply) => {
    await accounts.requestDeviceLink(clientOf(request), request.body.email)
    return reply.code(202).send({ success: true as const, data: null })
  })

  fastify.post('/device-link/confirm', {
    config: { public: true },
    schema: {
      tags: ['auth'],
      operationId: 'confirmDeviceLink',
      summary: 'Follow the emailed link: this device may sign in to its account while it is locked',
      description: 'Sets the `sign_in_device` cookie for the link\'s account, a fresh one: this device then signs in with the password as usual, past ' +
        'the account\'s lock (until it fails as often itself). It signs nothing in by itself. The browser must keep the cookie ' +
        '(`credentials: \'include\'`, the web client and the API on one site). An unknown, used or expired token is 400 `DEVICE_LINK_INVALID`. ' +
        'Records a `device-trusted` security event. Limited per client address like sign-in.',
      body: ref(TrustDeviceBody),
      response: { 200: NullSuccess }
    }
  }, async (request, reply) => {
    const { deviceCookie } = await accounts.trustDevice(clientOf(request), request.body.token)
    fastify.rememberDevice(reply, deviceCookie)
    return { success: true as const, data: null }
  })
}

export default recovery
