// Sign-in through the OpenID Connect providers of OIDC_PROVIDERS (accounts/provider-sign-in.ts),
// each behind our adapter (accounts/identity-provider.ts), and the purge of flows never called
// back and one-time codes never exchanged.
import type { FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { openIdProvider } from '../../accounts/identity-provider.js'
import { outboxMail } from '../../accounts/mail.js'
import { providerSignIn, type BrowserBinding, type BrowserSecrets, type ProviderSignIn } from '../../accounts/provider-sign-in.js'
import { allowedOrigins } from '../../config.js'
import { purgeExpiredSignInState } from '../../db/identities.js'

declare module 'fastify' {
  interface FastifyInstance {
    providerSignIn: ProviderSignIn
    /** Sets the cookie of a flow's or a code's browser binding (accounts/provider-sign-in.ts). */
    bindToBrowser: (reply: FastifyReply, binding: BrowserBinding) => void
    /** The binding cookies this request presented, by key. */
    browserSecretsOf: (request: FastifyRequest) => BrowserSecrets
    unbindFromBrowser: (reply: FastifyReply, key: string) => void
  }
}

const PURGE_INTERVAL_MS = 10 * 60_000

export default fp(async function identityProviders (fastify) {
  const { config, db, log } = fastify
  fastify.decorate('providerSignIn', providerSignIn({
    db,
    providers: config.identityProviders.map((settings) => openIdProvider(settings)),
    mail: outboxMail(fastify.mail, fastify.signInLimits.admitInbox),
    limits: fastify.signInLimits,
    apiUrl: config.http.apiUrl,
    appUrl: config.http.appUrl,
    allowedOrigins: allowedOrigins(config),
    warn: (err, message) => log.warn({ err }, message)
  }))

  // One cookie per flow and per code, named after its key, so two flows in one browser (two tabs,
  // a sign-in and a link) keep their own. On https the __Host- prefix: only this host, with
  // Secure and Path=/, may set it, so a sibling subdomain cannot plant its own flow's secret.
  // SameSite=Lax: sent on the provider's top-level redirect back, and on the web client's
  // exchange when it is on the same site.
  const secure = new URL(config.http.apiUrl).protocol === 'https:'
  const cookieName = (key: string) => `${secure ? '__Host-' : ''}oidc_${key}`
  const cookieOptions = { httpOnly: true, sameSite: 'lax', path: '/', secure } as const
  fastify.decorate('bindToBrowser', (reply: FastifyReply, binding: BrowserBinding) => {
    reply.setCookie(cookieName(binding.key), binding.secret, { ...cookieOptions, maxAge: Math.ceil(binding.maxAgeMs / 1000) })
  })
  fastify.decorate('browserSecretsOf', (request: FastifyRequest) => (key: string) => request.cookies[cookieName(key)])
  fastify.decorate('unbindFromBrowser', (reply: FastifyReply, key: string) => {
    reply.clearCookie(cookieName(key), cookieOptions)
  })

  fastify.jobs.purgeEvery('identity.purge', PURGE_INTERVAL_MS, async () => ({ purged: await purgeExpiredSignInState(db) }),
    { purged: 'expired sign-in flows and codes purged', failed: 'purging sign-in flows failed' })
}, { name: 'identity-providers', dependencies: ['db', 'scheduler', 'mailer', 'sign-in-limits', '@fastify/cookie'] })
