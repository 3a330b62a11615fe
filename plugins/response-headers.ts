// What every answer carries: the request id and the security headers of a JSON API (OWASP
// REST Security Cheat Sheet, ASVS 4.0.3 V14.4), fixed at start-up and copied onto the reply
// by one synchronous hook. app.ts registers this before any other plugin, so the hook runs
// first and also the answers other plugins send from their own hooks (load shedding, the
// shutdown 503, database not ready, CORS preflights) carry them.
//
// @fastify/helmet, used before, rebuilt its middleware and re-parsed the CSP on every
// request; on GET /health that cost more than the route itself. Helmet's document-only
// headers (X-XSS-Protection, X-Download-Options, X-DNS-Prefetch-Control, Origin-Agent-Cluster,
// Cross-Origin-Opener-Policy, X-Permitted-Cross-Domain-Policies) do nothing for a JSON body
// that may not be framed, sniffed or made to load anything, so they are left out. The one
// HTML page, /docs, sets its own policy on top (plugins/app/api-reference.ts).
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

export default fp(async function responseHeaders (fastify) {
  fastify.addHook('onRequest', (request, reply, done) => {
    reply.headers(SECURITY_HEADERS)
    reply.header('x-request-id', request.id)
    done()
  })
}, { name: 'response-headers' })
