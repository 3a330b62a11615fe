// Sign-in through identity providers (docs/identity-providers.md): the list, the start, the
// provider's callback, and the exchange of the one-time code for the usual sign-in answer.
// Registered by routes/auth/index.ts (under /auth); the work is accounts/provider-sign-in.ts's.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyError } from 'fastify'
import type { CallbackError } from '../../accounts/provider-sign-in.js'
import { ERROR_CATALOG, isAppError } from '../../errors.js'
import { clientOf } from '../../client-address.js'
import { errorResponses, ref } from '../../schemas/common.js'
import { SignInResponse } from '../../schemas/second-factor.js'
import { CallbackParams, CallbackQuery, ExchangeBody, ProviderList, ProviderParams, StartQuery } from '../../schemas/identities.js'

const Redirect = (description: string) => ({ description, type: 'null' })

/**
 * The `error=` of a callback refused or failed where no flow is known (a hook such as the global
 * rate limit, the service's own lookup): the browser is between the provider and the web client,
 * so this too is a redirect, never the JSON envelope.
 */
function callbackErrorOf (err: FastifyError): CallbackError {
  const status = isAppError(err) ? ERROR_CATALOG[err.code][0] : err.statusCode ?? 500
  if (status === 429) return 'RATE_LIMITED'
  if (status === 503) return 'SERVICE_UNAVAILABLE'
  return status >= 400 && status < 500 ? 'INVALID_REQUEST' : 'SERVER_ERROR'
}

const providers: FastifyPluginAsyncTypebox = async (fastify) => {
  const { providerSignIn } = fastify

  fastify.get('/providers', {
    config: { public: true },
    schema: {
      tags: ['auth'],
      operationId: 'listProviders',
      summary: 'The identity providers one can sign in with',
      response: { 200: ref(ProviderList) }
    }
  }, async () => ({ success: true as const, data: providerSignIn.providers() }))

  fastify.get('/providers/:id/start', {
    config: { public: true },
    schema: {
      tags: ['auth'],
      operationId: 'startProviderSignIn',
      summary: 'Sign in with an identity provider: redirects the browser to it',
      description: 'Open in the browser (a navigation, not a fetch). Redirects (302) to the provider\'s sign-in page: OpenID Connect ' +
        'authorization code flow with PKCE (S256), `state` and `nonce`, kept server-side for 10 minutes and bound to this browser by ' +
        'an httpOnly cookie (`oidc_<key>`, `__Host-oidc_<key>` on https). `returnTo` must be on APP_URL\'s origin or one of CORS_ORIGINS (400 otherwise); the default is APP_URL. ' +
        'A provider that cannot be reached redirects to `returnTo?error=PROVIDER_UNAVAILABLE`. Unknown provider: 404 `PROVIDER_NOT_FOUND`. ' +
        'Each start is a sign-in attempt of the client address, limited like sign-in (429).',
      params: ProviderParams,
      querystring: StartQuery,
      response: { 302: Redirect('To the provider, or back to `returnTo` with `error`'), ...errorResponses(404) }
    }
  }, async (request, reply) => {
    const started = await providerSignIn.start(clientOf(request), request.params.id, request.query.returnTo)
    if ('error' in started) return reply.redirect(started.error, 302)
    fastify.bindToBrowser(reply, started.binding)
    return reply.redirect(started.url, 302)
  })

  fastify.get('/providers/:id/callback', {
    config: { public: true },
    schema: {
      tags: ['auth'],
      operationId: 'providerCallback',
      summary: 'Where the provider sends the browser back: register this URL at the provider',
      description: 'Checks `state` against the flow this browser started, exchanges the code, verifies the ID token (issuer, audience, ' +
        'nonce, expiry, signature by the provider\'s keys), then redirects (302) to `returnTo` with `?signin=<one-time code>` ' +
        '(60 s, once, bound to this browser by a cookie like the flow\'s; for POST /auth/providers/exchange), or after linking with `?linked=<provider>`, or with `?error=<code>`: ' +
        '`INVALID_STATE`, `PROVIDER_UNAVAILABLE`, `PROVIDER_REJECTED`, `INVALID_ID_TOKEN`, `EMAIL_NOT_VERIFIED`, `EMAIL_INVALID`, `ACCOUNT_EXISTS` ' +
        '(an account has this email: sign in to it and link the provider), `IDENTITY_IN_USE`, `SERVER_ERROR`. ' +
        'Every answer is a 302, also when no flow is known (to APP_URL): `INVALID_STATE`, `PROVIDER_NOT_FOUND`, `RATE_LIMITED`, ' +
        '`SERVICE_UNAVAILABLE`, `INVALID_REQUEST`, `SERVER_ERROR`. The error statuses every route lists (400, 429, 500, 503) are such redirects here.',
      params: CallbackParams,
      querystring: CallbackQuery,
      response: { 302: Redirect('Back to the web client: with `signin`, `linked` or `error`') }
    },
    // Whatever failed before or around the flow (the global rate limit's hook, a database not ready): a redirect too.
    errorHandler (err: FastifyError, request, reply) {
      const error = callbackErrorOf(err)
      if (error === 'SERVER_ERROR') request.log.error({ err }, 'provider callback failed')
      else request.log.info({ error }, 'provider callback refused')
      return reply.redirect(providerSignIn.failedCallback(error), 302)
    }
  }, async (request, reply) => {
    const callbackUrl = new URL(request.url, fastify.config.http.apiUrl)
    const result = await providerSignIn.callback(request.params.id, callbackUrl, fastify.browserSecretsOf(request), clientOf(request))
    if (result.unbind !== undefined) fastify.unbindFromBrowser(reply, result.unbind)
    if (result.bind !== undefined) fastify.bindToBrowser(reply, result.bind)
    return reply.redirect(result.redirect, 302)
  })

  fastify.post('/providers/exchange', {
    config: { public: true },
    schema: {
      tags: ['auth'],
      operationId: 'exchangeSignInCode',
      summary: 'Exchange the one-time code from a provider sign-in for a token',
      description: 'The same answer as POST /auth/login: the token, the user, and the `auth_token` cookie; the session\'s method is ' +
        '`provider`. The browser that signed in must send it, with its cookies (`credentials: \'include\'`; the web client and the API on ' +
        'one site): the code is bound to that browser. An unknown, used or expired code (60 s), or one from another browser, is 400 ' +
        '`SIGN_IN_CODE_INVALID`. Limited per client address like sign-in.',
      body: ref(ExchangeBody),
      response: { 200: ref(SignInResponse) }
    }
  }, async (request, reply) => {
    const client = clientOf(request)
    const { user, provider, unbind } = await providerSignIn.exchange(client, request.body.code, fastify.browserSecretsOf(request))
    const answer = fastify.answerSignIn(reply, await fastify.signIn.complete(client, user, { way: 'provider', provider }))
    fastify.unbindFromBrowser(reply, unbind)
    return { success: true as const, ...answer }
  })
}

export default providers
