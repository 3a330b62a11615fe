// Sign-in through the OpenID Connect providers of OIDC_PROVIDERS (accounts/provider-sign-in.ts),
// each behind our adapter (accounts/identity-provider.ts), and the purge of flows never called
// back and one-time codes never exchanged.
import type { FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { openIdProvider } from '../../accounts/identity-provider.js'
import { outboxMail } from '../../accounts/mail.js'
import { FLOW_TTL_MS, providerSignIn, type ProviderSignIn } from '../../accounts/provider-sign-in.js'
import { allowedOrigins } from '../../config.js'
import { purgeExpiredSignInState } from '../../db/identities.js'

declare module 'fastify' {
  interface FastifyInstance {
    providerSignIn: ProviderSignIn
    /** Sets the cookie that binds a started flow to this browser: the callback asks for it. */
    bindProviderFlow: (reply: FastifyReply, browserSecret: string) => void
    providerFlowOf: (request: FastifyRequest) => string | undefined
    unbindProviderFlow: (reply: FastifyReply) => void
  }
}

const PURGE_INTERVAL_MS = 10 * 60_000
const FLOW_COOKIE = 'oidc_flow'

export default fp(async function identityProviders (fastify) {
  const { config, db, log } = fastify
  fastify.decorate('providerSignIn', providerSignIn({
    db,
    providers: config.identityProviders.map((settings) => openIdProvider(settings)),
    mail: outboxMail(fastify.mail),
    limits: fastify.signInLimits,
    apiUrl: config.http.apiUrl,
    appUrl: config.http.appUrl,
    allowedOrigins: allowedOrigins(config),
    warn: (err, message) => log.warn({ err }, message)
  }))

  // Sent only to /auth/providers/… (the callback), on the provider's top-level redirect back (Lax).
  const flowCookie = { httpOnly: true, sameSite: 'lax', path: '/auth/providers/', secure: new URL(config.http.apiUrl).protocol === 'https:' } as const
  fastify.decorate('bindProviderFlow', (reply: FastifyReply, browserSecret: string) => {
    reply.setCookie(FLOW_COOKIE, browserSecret, { ...flowCookie, maxAge: FLOW_TTL_MS / 1000 })
  })
  fastify.decorate('providerFlowOf', (request: FastifyRequest) => request.cookies[FLOW_COOKIE])
  fastify.decorate('unbindProviderFlow', (reply: FastifyReply) => {
    reply.clearCookie(FLOW_COOKIE, flowCookie)
  })

  fastify.jobs.every('identity.purge', PURGE_INTERVAL_MS, async () => {
    try {
      const purged = await purgeExpiredSignInState(db)
      if (purged > 0) log.info({ purged }, 'expired sign-in flows and codes purged')
    } catch (err) {
      log.warn({ err }, 'purging sign-in flows failed: trying again later')
    }
  })
}, { name: 'identity-providers', dependencies: ['db', 'scheduler', 'mailer', 'sign-in-limits', '@fastify/cookie'] })
