// The API reference page at GET /docs: Scalar's viewer, fed in the browser from the
// service's own OpenAPI document (GET /openapi.json, i.e. fastify.swagger()). It works
// offline: the page's one script is Scalar's bundle from the npm package, served by us at
// /docs/js/scalar.js; web fonts, telemetry, the hosted AI agent and MCP links are off, and
// the page's CSP lets it load nothing from any other host. test/browser/docs.browser.ts
// checks all of this in Chromium.
//
// Why Scalar and not @fastify/swagger-ui: our bodies are envelopes whose shape depends on
// the status ({success: true, data} or {success: false, error, details?}), and Scalar
// puts them side by side: beside each operation, one tab per documented status (200, 400,
// 401, 429, …) with an example envelope built from that status's schema, and the
// operation's auth requirement in its heading. Its "Test Request" client shows the real
// status, headers and body of a call. And it is one plugin serving one self-contained
// bundle (CSS included), with no static-file plugin to add.
//
// The routes it adds (/docs, a redirect to /docs/; /docs/; /docs/js/scalar.js) are public,
// hidden from the document and not logged per request; they are rate-limited like any
// route. They get a Content-Security-Policy of their own (the service-wide one, default-src
// 'none', would block the page): scripts from 'self' and, for the page's inline bootstrap
// script, a nonce drawn per response.
import { randomBytes } from 'node:crypto'
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { FastifyHelmetOptions } from '@fastify/helmet'
import scalar from '@scalar/fastify-api-reference'
import type { onSendHookHandler } from 'fastify'
import fp from 'fastify-plugin'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Per-route @fastify/helmet options, read by its onRequest hook at request time. */
    helmet?: Omit<FastifyHelmetOptions, 'global'>
  }
}

const PREFIX = '/docs'

// The nonce goes into the CSP header (helmet calls scriptNonce while writing it, before the
// handler) and into the page's <script> tags (addScriptNonce, once Scalar has rendered it).
const scriptNonces = new WeakMap<ServerResponse, string>()

function scriptNonce (_request: IncomingMessage, response: ServerResponse): string {
  const nonce = randomBytes(16).toString('base64')
  scriptNonces.set(response, nonce)
  return `'nonce-${nonce}'`
}

const addScriptNonce: onSendHookHandler = async (_request, reply, payload) => {
  const nonce = scriptNonces.get(reply.raw)
  if (typeof payload !== 'string' || nonce === undefined) return payload
  return payload.replaceAll('<script', `<script nonce="${nonce}"`)
}

export default fp(async function apiReference (fastify) {
  // The page's client sends "Test Request" calls to the document's server, API_URL.
  const apiOrigin = new URL(fastify.config.API_URL).origin
  const helmet: Omit<FastifyHelmetOptions, 'global'> = {
    contentSecurityPolicy: {
      useDefaults: false,
      directives: {
        defaultSrc: ["'none'"],
        scriptSrc: ["'self'", scriptNonce],
        // The bundle and Vue add <style> elements and style attributes without a nonce.
        // CSS runs no code, and img-src/font-src/connect-src keep it from fetching elsewhere.
        styleSrc: ["'self'", "'unsafe-inline'"],
        imgSrc: ["'self'", 'data:'],
        fontSrc: ["'self'", 'data:'],
        connectSrc: ["'self'", apiOrigin],
        baseUri: ["'none'"],
        formAction: ["'none'"],
        frameAncestors: ["'none'"]
      }
    }
  }

  // An encapsulated context, so this onRoute hook sees Scalar's routes only. (The
  // authenticate onRoute hook, added later by plugins/app, never sees them either.)
  await fastify.register(async function docs (instance) {
    instance.addHook('onRoute', (route) => {
      route.config = { ...route.config, public: true, logRequest: false, helmet }
      route.schema = { ...route.schema, hide: true }
      if (route.url === `${PREFIX}/`) route.onSend = [...[route.onSend ?? []].flat(), addScriptNonce]
    })
    await instance.register(scalar, {
      routePrefix: PREFIX,
      configuration: {
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
      }
    })
  })
}, {
  name: 'api-reference',
  // @fastify/autoload registers these first: the document's generator, and the global
  // rate limit, whose onRoute hook must exist before the docs routes are added.
  dependencies: ['@fastify/swagger', 'rate-limit']
})
