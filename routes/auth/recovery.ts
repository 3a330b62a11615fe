// Account recovery and email verification: forgot/reset password, verify an address, send a
// fresh verification link. Registered by routes/auth/index.ts (under /auth). Each email is
// queued in the transaction of the change that causes it and sent by plugins/app/mailer.ts.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { consumeEmailToken, findUserForEmailToken } from '../../db/email-tokens.js'
import { markEmailVerified, normalizeEmail, resetPassword, toUser } from '../../db/users.js'
import { hashToken } from '../../mail/outbox.js'
import { errorResponses, NullSuccess, ref } from '../../schemas/common.js'
import { EmailAlreadyVerifiedError, ResetTokenInvalidError, VerificationTokenInvalidError } from '../../errors.js'
import { AuthResponse, ForgotPasswordBody, assertPasswordFits, ResetPasswordBody, UserResponse, VerifyEmailBody } from '../../schemas/users.js'

const Accepted = { ...NullSuccess, description: 'Accepted: the email is queued' }

const recovery: FastifyPluginAsyncTypebox = async (fastify) => {
  const { db, mail, passwords, signInLimits } = fastify

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
    const email = normalizeEmail(request.body.email)
    // Past the address's links for the hour: answered the same, and nothing is sent.
    if (!await signInLimits.admitMail(request, email)) return reply.code(202).send({ success: true as const, data: null })
    // After the answer, and the same work whether or not the address has an account: one
    // statement that queues the link only for an account, then the sender is woken.
    mail.inBackground('password reset', (outbox) => outbox.passwordResetIfAccount(email))
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
    const { token, password } = request.body
    assertPasswordFits(password, 'password')
    const hash = hashToken(token)
    // Limited per address only: the email is not known before the token is checked.
    await signInLimits.admit(request)
    passwords.admit()
    const invalid = async () => {
      await signInLimits.failed(request)
      return new ResetTokenInvalidError()
    }
    // Checked before hashing (no hash for a bad token), and used up only in the transaction below.
    if (await findUserForEmailToken(db, hash, 'password_reset') === undefined) throw await invalid()
    const passwordHash = await passwords.hash(password)
    const user = await mail.transaction(async (tx, outbox) => {
      const userId = await consumeEmailToken(tx, hash, 'password_reset')
      if (userId === undefined) return undefined
      const updated = await resetPassword(tx, userId, passwordHash)
      await outbox.passwordChanged(updated)
      return updated
    })
    if (user === undefined) throw await invalid()
    const jwt = fastify.signIn(reply, user)
    await signInLimits.succeeded(request, reply, user.email)
    return { success: true as const, token: jwt, user: toUser(user) }
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
    const hash = hashToken(request.body.token)
    await signInLimits.admit(request)
    const user = await db.transaction().execute(async (tx) => {
      const userId = await consumeEmailToken(tx, hash, 'email_verification')
      return userId === undefined ? undefined : markEmailVerified(tx, userId)
    })
    if (user === undefined) {
      await signInLimits.failed(request)
      throw new VerificationTokenInvalidError()
    }
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
    const { user } = request
    if (user.email_verified !== null) throw new EmailAlreadyVerifiedError()
    if (await signInLimits.admitMail(request, user.email)) {
      await mail.transaction((tx, outbox) => outbox.verification(user))
    }
    return reply.code(202).send({ success: true as const, data: null })
  })
}

export default recovery
