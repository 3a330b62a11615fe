// The generated OpenAPI document lists every route of the contract with its security and error envelopes.
import t from 'tap'
import { ERROR_CODES } from '../../errors.js'
import { json, sharedApp } from '../support/helper.js'

const app = await sharedApp()

const res = await app.inject({ method: 'GET', url: '/openapi.json' })
const doc = json(res)

/** `public`; `protected`: a session only; or the scope an API key needs (a session also does). */
const expected: Array<[string, string, 'public' | 'protected' | `${'tasks' | 'preferences'}:${'read' | 'write'}`]> = [
  ['post', '/auth/register', 'public'],
  ['post', '/auth/login', 'public'],
  ['get', '/auth/me', 'protected'],
  ['post', '/auth/logout', 'protected'],
  ['post', '/auth/logout-others', 'protected'],
  ['post', '/auth/step-up', 'protected'],
  ['post', '/auth/mfa', 'public'],
  ['get', '/auth/providers', 'public'],
  ['get', '/auth/providers/{id}/start', 'public'],
  ['get', '/auth/providers/{id}/callback', 'public'],
  ['post', '/auth/providers/exchange', 'public'],
  ['post', '/auth/password/forgot', 'public'],
  ['post', '/auth/password/reset', 'public'],
  ['post', '/auth/email/verify', 'public'],
  ['post', '/auth/email/verification', 'protected'],
  ['post', '/auth/device-link', 'public'],
  ['post', '/auth/device-link/confirm', 'public'],
  ['get', '/account/profile', 'protected'],
  ['patch', '/account/profile', 'protected'],
  ['put', '/account/profile', 'protected'],
  ['delete', '/account/delete', 'protected'],
  ['get', '/account/sessions', 'protected'],
  ['delete', '/account/sessions/{id}', 'protected'],
  ['get', '/account/security-events', 'protected'],
  ['post', '/account/identities/{id}', 'protected'],
  ['get', '/account/identities', 'protected'],
  ['delete', '/account/identities/{id}', 'protected'],
  ['get', '/account/mfa', 'protected'],
  ['post', '/account/mfa/totp', 'protected'],
  ['post', '/account/mfa/totp/confirm', 'protected'],
  ['delete', '/account/mfa/totp', 'protected'],
  ['post', '/account/mfa/recovery-codes', 'protected'],
  ['post', '/account/passkeys/options', 'protected'],
  ['post', '/account/passkeys', 'protected'],
  ['get', '/account/passkeys', 'protected'],
  ['patch', '/account/passkeys/{id}', 'protected'],
  ['delete', '/account/passkeys/{id}', 'protected'],
  ['post', '/auth/passkey/options', 'public'],
  ['post', '/auth/passkey', 'public'],
  ['post', '/auth/step-up/options', 'protected'],
  ['post', '/account/api-keys', 'protected'],
  ['get', '/account/api-keys', 'protected'],
  ['post', '/account/api-keys/{id}/rotate', 'protected'],
  ['delete', '/account/api-keys/{id}', 'protected'],
  ['post', '/api-keys/revoke', 'public'],
  ['get', '/tasks', 'tasks:read'],
  ['post', '/tasks', 'tasks:write'],
  ['get', '/tasks/{id}', 'tasks:read'],
  ['patch', '/tasks/{id}', 'tasks:write'],
  ['put', '/tasks/{id}', 'tasks:write'],
  ['delete', '/tasks/{id}', 'tasks:write'],
  ['get', '/preferences', 'preferences:read'],
  ['patch', '/preferences', 'preferences:write'],
  ['put', '/preferences', 'preferences:write'],
  ['post', '/checkout', 'protected'],
  ['post', '/billing-portal', 'protected'],
  ['get', '/subscription', 'protected'],
  ['delete', '/subscription', 'protected'],
  ['post', '/webhooks/payment', 'public'],
  ['get', '/health', 'public'],
  ['get', '/ready', 'public']
]

t.test('served as OpenAPI 3.1 JSON without auth', async (t) => {
  t.equal(res.statusCode, 200)
  t.match(res.headers['content-type'], /^application\/json/)
  t.equal(doc.openapi, '3.1.0')
  t.same(Object.keys(doc.components.securitySchemes).sort(), ['apiKeyAuth', 'bearerAuth', 'cookieAuth'])
})

t.test('every route of the contract is documented, and nothing else', async (t) => {
  const documented = Object.entries(doc.paths as Record<string, Record<string, unknown>>)
    .flatMap(([path, ops]) => Object.keys(ops).map((method) => `${method} ${path}`)).sort()
  t.same(documented, expected.map(([m, p]) => `${m} ${p}`).sort())
})

t.test('each operation has an id, a tag, a summary, and its security and error envelopes', async (t) => {
  const ids = new Set<string>()
  for (const [method, path, access] of expected) {
    const op = doc.paths[path][method]
    t.type(op.operationId, 'string', `${method} ${path} operationId`)
    t.notOk(ids.has(op.operationId), `${op.operationId} is unique`)
    ids.add(op.operationId)
    t.ok(op.tags?.length, `${method} ${path} tags`)
    t.type(op.summary, 'string', `${method} ${path} summary`)
    t.ok(op.responses['500'], `${method} ${path} documents 500`)
    if (access !== 'public') {
      const keyed = access === 'protected' ? [] : [{ apiKeyAuth: [access] }]
      t.same(op.security, [{ bearerAuth: [] }, { cookieAuth: [] }, ...keyed], `${method} ${path} security`)
      t.ok(op.responses['401'], `${method} ${path} documents 401`)
      t.ok(op.responses['403'], `${method} ${path} documents 403 (an API key where none is taken, or without the scope)`)
    } else {
      t.same(op.security, [], `${method} ${path} is public`)
    }
    if (op.requestBody) {
      t.ok(op.responses['400'], `${method} ${path} documents 400`)
      t.equal(JSON.stringify(op.requestBody).includes('errorMessage'), false, 'internal ajv keyword stripped')
    }
  }
})

/** A schema or response, or the component its $ref names. */
const resolve = (value: any): any => {
  if (typeof value?.$ref !== 'string') return value
  const [, section, name] = /^#\/components\/(schemas|responses)\/(.+)$/.exec(value.$ref)!
  return resolve(doc.components[section!][name!])
}

t.test('every error response documents the stable `code`, an enum of the catalog', async (t) => {
  let checked = 0
  for (const [method, path] of expected) {
    for (const [status, response] of Object.entries(doc.paths[path][method].responses as Record<string, any>)) {
      if (!/^[45]/.test(status)) continue
      const schema = resolve(resolve(response).content['application/json'].schema)
      t.ok(schema.required.includes('code'), `${method} ${path} ${status}: code is required`)
      t.same(resolve(schema.properties.code).enum, ERROR_CODES, `${method} ${path} ${status}: code lists the catalog`)
      checked++
    }
  }
  t.ok(checked > 100, `${checked} error responses checked`)
  t.ok(ERROR_CODES.includes('NO_STRIPE_CUSTOMER'), 'the code the origin client branches on')
})

t.test('shared schemas and responses are components, referenced rather than repeated', async (t) => {
  for (const name of ['ErrorCode', 'ErrorResponse', 'Task', 'User', 'Preferences', 'Subscription', 'CreateTaskBody']) t.ok(name in doc.components.schemas, `${name} is a component`)
  t.same(Object.keys(doc.components.responses).sort(), ['BadGateway', 'BadRequest', 'Conflict', 'Forbidden', 'InternalServerError', 'NotFound', 'PayloadTooLarge', 'ServiceUnavailable', 'TooManyRequests', 'Unauthorized', 'UnprocessableContent', 'UnsupportedMediaType'])
  const text = JSON.stringify(doc)
  t.equal(text.split('"What went wrong, for people"').length - 1, 1, 'the error envelope is defined once')
  // The three idempotent operations describe their 409 in their own words (IDEMPOTENCY_KEY_IN_USE).
  t.equal(text.split('"$ref":"#/components/schemas/ErrorResponse"').length - 1, 12 + 3, 'once per error status, and where an operation has its own words')
  t.ok(text.split('"$ref":"#/components/responses/').length > 150, 'and each status is referenced by every operation that answers it')
  // About 1.7 k characters an operation; the envelope inlined at every status made 3.4 k (99 k for 29).
  t.ok(text.length < 2_000 * expected.length, `${text.length} characters for ${expected.length} operations`)
})

t.test('no response schema exposes the password hash', async (t) => {
  const responses = Object.values(doc.paths as Record<string, Record<string, { responses: unknown }>>)
    .flatMap((ops) => Object.values(ops).map((op) => op.responses))
  t.notMatch(JSON.stringify(responses), /"password"/i)
  const user = resolve(resolve(resolve(doc.paths['/auth/me'].get.responses['200']).content['application/json'].schema).properties.data)
  for (const name of ['User', 'UserResponse', 'AuthResponse', 'ProfileResponse']) t.notMatch(JSON.stringify(doc.components.schemas[name]), /"password"/i, `${name} has no password`)
  t.same(Object.keys(user.properties).sort(), ['createdAt', 'email', 'emailVerified', 'id', 'image', 'name', 'updatedAt'])
})

t.test('the API reference page is public, self-contained and not in the document', async (t) => {
  const page = await app.inject({ method: 'GET', url: '/docs/' })
  t.equal(page.statusCode, 200)
  t.match(page.headers['content-type'], /^text\/html/)
  const csp = String(page.headers['content-security-policy'])
  const nonce = /'nonce-([^']+)'/.exec(csp)?.[1]
  t.ok(nonce, 'a script nonce in the CSP')
  t.match(csp, /script-src 'self' 'nonce-/, 'the page\'s own policy replaces the API\'s')
  t.equal(page.headers['x-content-type-options'], 'nosniff', 'the other security headers still apply')
  t.match(page.body, `<script nonce="${nonce}"`)
  t.notMatch(page.body, /https?:\/\/(?!localhost|127\.0\.0\.1)[a-z0-9.-]+\.[a-z]{2,}\/[^"']*\.(js|css)/i, 'no script or style from another host')
  t.equal(page.headers['cross-origin-opener-policy'], 'same-origin', 'a document gets its own opener policy')
  const script = await app.inject({ method: 'GET', url: '/docs/js/scalar.js' })
  t.equal(script.statusCode, 200)
  t.match(script.headers['content-type'], /javascript/)
  t.ok(script.rawPayload.length > 1_000_000, 'the whole bundle')
  const bare = await app.inject({ method: 'GET', url: '/docs' })
  t.equal(bare.statusCode, 301)
  t.equal(bare.headers.location, '/docs/')
  t.notOk(Object.keys(doc.paths).some((path) => path.startsWith('/docs')))
})
