// The security headers of a JSON API (OWASP REST Security Cheat Sheet): fixed at start-up
// and copied onto every reply, 404s and errors included, by one synchronous hook.
// @fastify/helmet, used before, rebuilt its middleware and re-parsed the CSP on every
// request; on GET /health that cost more than the route itself. Helmet's document-only
// headers (X-XSS-Protection, X-Download-Options, X-DNS-Prefetch-Control, Origin-Agent-Cluster,
// Cross-Origin-Opener-Policy, X-Permitted-Cross-Domain-Policies) do nothing for a JSON body
// that may not be framed, sniffed or made to load anything, so they are left out. The one
// HTML page, /docs, sets its own policy on top (plugins/external/api-reference.ts).
import fp from 'fastify-plugin'

export const SECURITY_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  // Per-user data: no browser or intermediary keeps a copy.
  'cache-control': 'no-store',
  'content-security-policy': "default-src 'none'; frame-ancestors 'none'",
  'cross-origin-resource-policy': 'same-site',
  'referrer-policy': 'no-referrer',
  'strict-transport-security': 'max-age=31536000; includeSubDomains',
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY'
})

export default fp(async function securityHeaders (fastify) {
  fastify.addHook('onRequest', (_request, reply, done) => {
    reply.headers(SECURITY_HEADERS)
    done()
  })
}, { name: 'security-headers' })
