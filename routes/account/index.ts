// The caller's profile, and account deletion; sessions and security events in ./sessions.ts,
// linked identities in ./identities.ts, two-step sign-in in ./mfa.ts, passkeys in ./passkeys.ts,
// API keys in ./api-keys.ts.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { deleteUser, findPendingEmail, toProfile } from '../../db/users.js'
import { clientOf } from '../../client-address.js'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { Type } from 'typebox'
import { errorResponses, ref, Success } from '../../schemas/common.js'
import { ValidationError } from '../../errors.js'
import { assertPasswordFits, CurrentProfileResponse, ProfileResponse, ProfileUpdateBody } from '../../schemas/users.js'
import identities from './identities.js'
import apiKeys from './api-keys.js'
import mfa from './mfa.js'
import passkeys from './passkeys.js'
import sessions from './sessions.js'

/** The rules of a profile change JSON Schema cannot express: which fields go together, and the new password's bytes. */
function parseProfileChange (body: ProfileUpdateBody): ProfileUpdateBody {
  const required = (field: string) => new ValidationError([`Both currentPassword and newPassword are required to change the password - ${field}`])
  if (body.newPassword !== undefined && body.currentPassword === undefined) throw required('currentPassword')
  // The current password alone is for a new email.
  if (body.currentPassword !== undefined && body.newPassword === undefined && body.email === undefined) throw required('newPassword')
  if (body.newPassword !== undefined) assertPasswordFits(body.newPassword, 'newPassword')
  return body
}

const account: FastifyPluginAsyncTypebox = async (fastify) => {
  const { accounts, db } = fastify
  await fastify.register(sessions)
  await fastify.register(identities)
  await fastify.register(mfa)
  await fastify.register(passkeys)
  await fastify.register(apiKeys)

  fastify.get('/profile', {
    schema: {
      tags: ['account'],
      operationId: 'getProfile',
      summary: 'The caller\'s profile',
      description: 'The user object, and `pendingEmail`: a new address waiting for its confirmation (null when none).',
      response: { 200: ref(CurrentProfileResponse) }
    }
  }, async (request) => ({ success: true as const, data: toProfile(request.user, await findPendingEmail(db, request.user.id)) }))

  const updateProfile = {
    tags: ['account'],
    summary: 'Change name, image, email or password',
    description: 'A password change needs `currentPassword` and `newPassword` together; it revokes every older token and returns a fresh `token`. ' +
      'A new email needs `currentPassword` too (400 `CURRENT_PASSWORD_REQUIRED` without it), so a stolen token alone cannot move the account to another inbox. ' +
      'Checking `currentPassword` is limited like sign-in (429); a wrong one is 400 `INVALID_CURRENT_PASSWORD`. Of two concurrent password changes one wins and the other is a 409 `PASSWORD_CHANGE_CONFLICT`. ' +
      'A password change queues a notice email. A new email takes effect only when that address confirms it: the answer keeps `email` and shows the new ' +
      'address as `pendingEmail`; a verification link goes to the new address (APP_URL/verify-email?token=…, POST /auth/email/verify applies the change ' +
      'and marks it verified) and a notice to the current one, which keeps signing in until then. A later change replaces a waiting one; the current ' +
      'address again cancels it, and so does a password reset. A taken address is 409 `EMAIL_TAKEN`. ' +
      'PUT is the same partial update as PATCH (the origin web client edits the name with PUT).',
    body: ref(ProfileUpdateBody),
    response: { 200: ref(ProfileResponse), ...errorResponses(409) }
  }
  const profileHandler = async (request: FastifyRequest<{ Body: ProfileUpdateBody }>, reply: FastifyReply) => {
    const client = clientOf(request)
    const { user, pendingEmail, deviceCookie, passwordChanged } = await accounts.changeProfile(client, request.user, parseProfileChange(request.body))
    // Every session ended with the old password: the caller's is renewed. The auth cookie first: clients that read one Set-Cookie find the token.
    const token = passwordChanged
      ? fastify.answerSignIn(reply, await fastify.signIn.complete(client, user, { way: 'password-change', session: request.principal.session! })).token
      : undefined
    if (deviceCookie !== undefined) fastify.rememberDevice(reply, deviceCookie)
    return { success: true as const, data: toProfile(user, pendingEmail), ...(token !== undefined && { token }) }
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
