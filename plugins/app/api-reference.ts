// The API reference page at GET /docs: Scalar's viewer, fed in the browser from the
// service's own OpenAPI document (GET /openapi.json, i.e. fastify.swagger()). It works
// offline: the page's one script is Scalar's bundle from the npm package, served by us at
// /docs/js/scalar.js; web fonts, telemetry, the hosted AI agent and MCP links are off, and
// the page's CSP lets it load nothing from any other host. test/integration/docs-browser.test.ts
// checks all of this in Chromium.
//
// Why Scalar and not @fastify/swagger-ui: our bodies are envelopes whose shape depends on
// the status ({success: true, data} or {success: false, error, code, details?}), and Scalar
// puts them side by side: beside each operation, one tab per documented status (200, 400,
// 401, 429, …) with an example envelope built from that status's schema, and the
// operation's auth requirement in its heading. Its "Test Request" client shows the real
// status, headers and body of a call. And it is one plugin serving one self-contained
// bundle (CSS included), with no static-file plugin to add.
//
// Scalar's plugin holds its 4 MB bundle in memory as a string, twice over (16.5 MB of a
// 48 MB heap at start-up: more to mark in every full GC, more resident memory), so it is
// loaded on the first request for the page, into a Fastify instance of its own, and our
// routes hand its answers on. The first visit waits for that (about a second); the
// memory is spent only by instances whose docs are read.
//
// The routes (/docs, a redirect to /docs/; /docs/; /docs/js/scalar.js) are public,
// hidden from the document and not logged per request; they are rate-limited like any
// route. They get a Content-Security-Policy of their own instead of the API's
// (default-src 'none' would block the page): scripts from 'self' and, for the page's inline
// bootstrap script, a nonce drawn per response. The API's other security headers
// (plugins/response-headers.ts) apply to them as to every route.
import { randomBytes } from 'node:crypto'
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest, type onSendHookHandler } from 'fastify'
import fp from 'fastify-plugin'

const PREFIX = '/docs'
/** What Scalar's plugin serves under the prefix (a `url` source adds no document routes). */
const ROUTES = [PREFIX, `${PREFIX}/`, `${PREFIX}/js/scalar.js`]
const SCALAR_CONFIGURATION = {
  // A `url` source: the page fetches /openapi.json itself, and Scalar serves no
  // second copy of the document under /docs.
  url: '/openapi.json',
  pageTitle: 'Task and subscription backend: API reference',
  withDefaultFonts: false,
  telemetry: false,
  hideClientButton: true,
  showDeveloperTools: 'never',
  agent: { disabled: true },
  mcp: { disabled: true },
  defaultOpenAllTags: true
} as const

async function startScalar (): Promise<FastifyInstance> {
  const { default: scalar } = await import('@scalar/fastify-api-reference')
  const app = Fastify({ logger: false })
  await app.register(scalar, { routePrefix: PREFIX, configuration: SCALAR_CONFIGURATION })
  await app.ready()
  return app
}

export default fp(async function apiReference (fastify) {
  // The page's client sends "Test Request" calls to the document's server, API_URL.
  const apiOrigin = new URL(fastify.config.http.apiUrl).origin
  const policy = (scriptNonce?: string) => [
    "default-src 'none'",
    `script-src 'self'${scriptNonce === undefined ? '' : ` 'nonce-${scriptNonce}'`}`,
    // The bundle and Vue add <style> elements and style attributes without a nonce.
    // CSS runs no code, and img-src/font-src/connect-src keep it from fetching elsewhere.
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    "font-src 'self' data:",
    `connect-src 'self' ${apiOrigin}`,
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'"
  ].join('; ')
  const staticPolicy = policy()

  // onSend runs after every onRequest hook, so this policy replaces the API's. The page's
  // <script> tags get the nonce once Scalar has rendered it.
  const docsPolicy: onSendHookHandler = async (_request, reply, payload) => {
    if (typeof payload !== 'string' || !String(reply.getHeader('content-type')).startsWith('text/html')) {
      reply.header('content-security-policy', staticPolicy)
      return payload
    }
    const nonce = randomBytes(16).toString('base64')
    reply.header('content-security-policy', policy(nonce))
    // A document, unlike the API's answers: no window another site opens shares its context.
    reply.header('cross-origin-opener-policy', 'same-origin')
    return payload.replaceAll('<script', `<script nonce="${nonce}"`)
  }

  let scalarApp: Promise<FastifyInstance> | undefined
  fastify.addHook('onClose', async () => { await (await scalarApp?.catch(() => undefined))?.close() })
  const fromScalar = async (request: FastifyRequest, reply: FastifyReply) => {
    scalarApp ??= startScalar().catch((err: unknown) => {
      scalarApp = undefined // the next visit tries again
      throw err
    })
    const answer = await (await scalarApp).inject({ method: 'GET', url: request.url })
    // A failure inside Scalar is ours to answer, in our envelope.
    if (answer.statusCode >= 500) throw new Error(`the API reference answered ${answer.statusCode}`)
    reply.code(answer.statusCode)
    for (const name of ['content-type', 'location']) {
      const value = answer.headers[name]
      if (typeof value === 'string') reply.header(name, value)
    }
    return reply.send(String(answer.headers['content-type']).startsWith('text/') ? answer.payload : answer.rawPayload)
  }

  // An encapsulated context, so this onRoute hook sees these routes only. (The
  // authenticate onRoute hook, added later by plugins/app, never sees them either.)
  await fastify.register(async function docs (instance) {
    instance.addHook('onRoute', (route) => {
      route.config = { ...route.config, public: true, logRequest: false, needsDatabase: false }
      route.schema = { ...route.schema, hide: true }
      route.onSend = [...[route.onSend ?? []].flat(), docsPolicy]
    })
    for (const url of ROUTES) instance.get(url, fromScalar)
  })
}, {
  name: 'api-reference',
  // @fastify/autoload registers these first: the document's generator, and the global
  // rate limit, whose onRoute hook must exist before the docs routes are added.
  dependencies: ['@fastify/swagger', 'rate-limit']
})
