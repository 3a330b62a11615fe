// The caller's profile, and account deletion.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { voidEmailTokens } from '../../db/email.js'
import { deleteUser, isUniqueViolation, normalizeEmail, toUser, updateUser } from '../../db/users.js'
import { queueEmailChanged, queuePasswordChanged, queueVerification } from '../../mail/outbox.js'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { Type } from 'typebox'
import { errorResponses, ref, Success } from '../../schemas/common.js'
import { CurrentPasswordRequiredError, EmailTakenError, InvalidCurrentPasswordError, PasswordChangeConflictError, UnauthorizedError, ValidationError } from '../../errors.js'
import { assertPasswordFits, ProfileResponse, ProfileUpdateBody, UserResponse } from '../../schemas/users.js'

const account: FastifyPluginAsyncTypebox = async (fastify) => {
  const { db, mail, passwords, signInLimits } = fastify

  fastify.get('/profile', {
    schema: {
      tags: ['account'],
      operationId: 'getProfile',
      summary: 'The caller\'s profile',
      response: { 200: ref(UserResponse) }
    }
  }, async (request) => ({ success: true as const, data: toUser(request.user) }))

  const updateProfile = {
    tags: ['account'],
    summary: 'Change name, image, email or password',
    description: 'A password change needs `currentPassword` and `newPassword` together; it revokes every older token and returns a fresh `token`. ' +
      'A new email needs `currentPassword` too (400 `CURRENT_PASSWORD_REQUIRED` without it), so a stolen token alone cannot move the account to another inbox. ' +
      'Checking `currentPassword` is limited like sign-in (429); a wrong one is 400 `INVALID_CURRENT_PASSWORD`. Of two concurrent password changes one wins and the other is a 409 `PASSWORD_CHANGE_CONFLICT`. ' +
      'A password change queues a notice email. A new email clears `emailVerified` and queues a verification email to it and a notice to the old address. ' +
      'PUT is the same partial update as PATCH (the origin web client edits the name with PUT).',
    body: ref(ProfileUpdateBody),
    response: { 200: ref(ProfileResponse), ...errorResponses(409) }
  }
  const profileHandler = async (request: FastifyRequest<{ Body: ProfileUpdateBody }>, reply: FastifyReply) => {
    const { body, user } = request
    const email = body.email === undefined ? undefined : normalizeEmail(body.email)
    const emailChanges = email !== undefined && email !== user.email
    if (body.newPassword !== undefined && body.currentPassword === undefined) {
      throw new ValidationError(['Both currentPassword and newPassword are required to change the password - currentPassword'])
    }
    if (body.currentPassword !== undefined && body.newPassword === undefined && body.email === undefined) {
      throw new ValidationError(['Both currentPassword and newPassword are required to change the password - newPassword'])
    }
    // Before anything else, also before a taken address is a 409: a stolen token alone learns nothing.
    if (emailChanges && body.currentPassword === undefined) throw new CurrentPasswordRequiredError()
    let passwordHash: string | undefined
    if (body.currentPassword !== undefined) {
      if (body.newPassword !== undefined) assertPasswordFits(body.newPassword, 'newPassword')
      // Guessing the current password with a stolen token costs what guessing at sign-in does.
      await signInLimits.admit(request, user.email)
      passwords.admit()
      if (!await passwords.verify(body.currentPassword, user.password)) {
        await signInLimits.failed(request, user.email)
        throw new InvalidCurrentPasswordError()
      }
      if (body.newPassword !== undefined) passwordHash = await passwords.hash(body.newPassword)
    }
    let updated
    try {
      // The emails are queued in the transaction of the change, so they exist exactly when it does.
      updated = await db.transaction().execute(async (tx) => {
        const row = await updateUser(tx, user.id, {
          name: body.name === undefined ? undefined : (body.name?.trim() || null),
          image: body.image,
          email,
          // Only over the password that was checked: of two concurrent changes, one wins.
          passwordHash: passwordHash === undefined ? undefined : { from: user.password, to: passwordHash }
        })
        if (row === undefined) return undefined
        if (emailChanges) {
          await queueVerification(tx, mail.context, row)
          await queueEmailChanged(tx, mail.context, row, user.email, row.email)
        }
        if (passwordHash !== undefined) {
          // A reset link sent before the change must not undo it.
          await voidEmailTokens(tx, row.id, 'password_reset')
          await queuePasswordChanged(tx, mail.context, row)
        }
        return row
      })
    } catch (err) {
      if (isUniqueViolation(err)) throw new EmailTakenError()
      throw err
    }
    if (updated !== undefined && (emailChanges || passwordHash !== undefined)) mail.wake()
    if (updated === undefined) throw passwordHash === undefined ? new UnauthorizedError() : new PasswordChangeConflictError()
    const token = passwordHash === undefined ? undefined : fastify.signIn(reply, updated)
    if (body.currentPassword !== undefined) await signInLimits.succeeded(request, reply, updated.email)
    return { success: true as const, data: toUser(updated), ...(token !== undefined && { token }) }
  }
  fastify.patch('/profile', { schema: { ...updateProfile, operationId: 'updateProfile' } }, profileHandler)
  fastify.put('/profile', { schema: { ...updateProfile, operationId: 'replaceProfile' } }, profileHandler)

  fastify.delete('/delete', {
    schema: {
      tags: ['account'],
      operationId: 'deleteAccount',
      summary: 'Delete the account with its tasks, preferences and usage events',
      description: 'A live subscription is cancelled at the provider first, immediately; if the provider fails, nothing is deleted (502).',
      response: { 200: Success(Type.Object({ deleted: Type.Literal(true) })), ...errorResponses(502) }
    }
  }, async (request, reply) => {
    // Stop billing before the record of who to bill disappears.
    await fastify.billing.closeBillingAccount(request.user.id)
    // One statement; the foreign keys cascade inside it, so nothing is half-deleted.
    await deleteUser(db, request.user.id)
    fastify.clearAuthCookie(reply)
    return { success: true as const, data: { deleted: true as const } }
  })
}

export default account
