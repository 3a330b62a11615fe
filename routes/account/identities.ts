// The identity providers linked to the caller's account (docs/identity-providers.md).
// Registered by routes/account/index.ts (under /account).
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { IdentityRow } from '../../db/types.js'
import { clientOf } from '../../client-address.js'
import { errorResponses, NullSuccess, ref } from '../../schemas/common.js'
import { IdentityList, IdentityParams, LinkParams, LinkStarted, StartQuery, type Identity } from '../../schemas/identities.js'
import { ServiceUnavailableError } from '../../errors.js'

const toIdentity = (row: IdentityRow): Identity => ({ id: row.id, provider: row.provider, email: row.email, createdAt: row.created_at })

const identities: FastifyPluginAsyncTypebox = async (fastify) => {
  const { providerSignIn } = fastify

  fastify.post('/identities/:id', {
    // A new way in: only from a session that signed in or stepped up within STEP_UP_MAX_AGE_S.
    config: { stepUp: true },
    schema: {
      tags: ['account'],
      operationId: 'startIdentityLink',
      summary: 'Link an identity provider\'s sign-in to the account: the URL to send the browser to',
      description: 'Starts the flow of GET /auth/providers/{id}/start bound to the caller, and sets its browser cookie (so the API\'s ' +
        'cookies must reach it: the same site as the web client, as for the `auth_token` cookie). When the provider sends the browser ' +
        'back, the identity is linked and the browser lands on `returnTo?linked=<provider>` (`returnTo` as for the sign-in; default APP_URL), or `returnTo?error=IDENTITY_IN_USE` when ' +
        'it signs in another account (other errors as for sign-in). A notice is emailed. Unknown provider: 404 `PROVIDER_NOT_FOUND`; ' +
        'a provider that cannot be reached: 503. Only from a session that signed in or stepped up within STEP_UP_MAX_AGE_S ' +
        '(`x-step-up`; otherwise 403 `STEP_UP_REQUIRED`: a stolen older token cannot add a way in), to an account whose email is verified (403 ' +
        '`EMAIL_NOT_VERIFIED`). The link completes only while that session is live.',
      params: LinkParams,
      querystring: StartQuery,
      response: { 200: ref(LinkStarted), ...errorResponses(404) }
    }
  }, async (request, reply) => {
    const started = await providerSignIn.startLink(clientOf(request), { user: request.user, token: request.principal.session! }, request.params.id, request.query.returnTo)
    if ('error' in started) throw new ServiceUnavailableError()
    fastify.bindToBrowser(reply, started.binding)
    return { success: true as const, data: { url: started.url } }
  })

  fastify.get('/identities', {
    schema: {
      tags: ['account'],
      operationId: 'listIdentities',
      summary: 'The identity providers that sign the account in',
      response: { 200: ref(IdentityList) }
    }
  }, async (request) => ({ success: true as const, data: (await providerSignIn.identities(request.user.id)).map(toIdentity) }))

  fastify.delete('/identities/:id', {
    schema: {
      tags: ['account'],
      operationId: 'unlinkIdentity',
      summary: 'Unlink an identity provider from the account',
      description: 'Refused with 409 `LAST_SIGN_IN_METHOD` when the account has no password, no other identity and no passkey. Another user\'s or an ' +
        'unknown identity: 404 `IDENTITY_NOT_FOUND`. A notice is emailed.',
      params: IdentityParams,
      response: { 200: NullSuccess, ...errorResponses(404, 409) }
    }
  }, async (request) => {
    await providerSignIn.unlink(request.user, request.params.id, clientOf(request))
    return { success: true as const, data: null }
  })
}

export default identities
