// Hostile bodies cost less than the requests they are refused for: a body limit that fits
// each route (derived from its schema, plugins/body-limits.ts), nesting refused before the
// body is parsed, and a flood of unknown fields refused on the first MAX_DETAILS of them.
// (The largest valid body of every route still fits: the last test.)
import t from 'tap'
import { MAX_DETAILS } from '../../errors.js'
import { json, registerUser, sharedApp } from '../support/helper.js'

const PUBLIC_BODY_ROUTES = ['/auth/login', '/auth/register', '/auth/password/forgot', '/auth/password/reset', '/auth/email/verify']
const codeOf = (url: string) => url === '/auth/login' ? 'INVALID_INPUT' : 'VALIDATION_FAILED'

// The review's bodies: ~1 MB of 90,000 keys, and arrays nested 500,000 deep.
const manyKeys = (n: number) => `{${Array.from({ length: n }, (_, i) => `"k${i}":1`).join(',')}}`
const nested = (n: number) => `${'['.repeat(n)}${']'.repeat(n)}`

t.test('a megabyte to a public route is refused as too large for it, not parsed', async (t) => {
  const app = await sharedApp()
  for (const url of PUBLIC_BODY_ROUTES) {
    for (const [what, payload] of [['90,000 keys', manyKeys(90_000)], ['500,000 levels', nested(500_000)]]) {
      const res = await app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json' }, payload })
      t.equal(res.statusCode, 413, `${url}, ${what}`)
      t.same(json(res), { success: false, error: 'Payload too large', code: 'PAYLOAD_TOO_LARGE' }, `${url}, ${what}`)
    }
    // A sign-in form is a few kilobytes at most, and its limit is of that order.
    const tooLargeForAForm = await app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json' }, payload: JSON.stringify({ email: `${'a'.repeat(40_000)}@example.com` }) })
    t.equal(tooLargeForAForm.statusCode, 413, `${url}: 40 KB`)
  }
})

t.test('nesting deeper than any valid body is refused before parsing', async (t) => {
  const app = await sharedApp()
  for (const url of PUBLIC_BODY_ROUTES) {
    const res = await app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json' }, payload: nested(1000) })
    t.equal(res.statusCode, 400, url)
    t.same(json(res), { success: false, error: codeOf(url) === 'INVALID_INPUT' ? 'Invalid input' : 'Validation failed', code: codeOf(url), details: ['Must not nest more than 16 levels deep - body'] }, url)
  }
  const user = await registerUser(app)
  const deepInAString = await app.inject({ method: 'POST', url: '/tasks', headers: user.auth, payload: { title: '[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[' } })
  t.equal(deepInAString.statusCode, 201, 'brackets inside a string are text, not nesting')
  const deepField = await app.inject({ method: 'POST', url: '/tasks', headers: { ...user.auth, 'content-type': 'application/json' }, payload: `{"title":"x","description":${nested(30_000)}}` })
  t.equal(deepField.statusCode, 400)
  t.same(json(deepField).details, ['Must not nest more than 16 levels deep - body'])
})

t.test('a flood of unknown fields is refused on the first of them', async (t) => {
  const app = await sharedApp()
  const res = await app.inject({ method: 'POST', url: '/auth/login', headers: { 'content-type': 'application/json' }, payload: manyKeys(500) })
  t.equal(res.statusCode, 400)
  const body = json(res)
  t.equal(body.code, 'INVALID_INPUT')
  t.same(body.details, Array.from({ length: MAX_DETAILS }, (_, i) => `Unknown field - k${i}`), 'the first twenty unknown fields, in order')

  const few = await app.inject({ method: 'POST', url: '/auth/register', payload: { email: 'bad', password: 'short', extra: 1 } })
  t.same(json(few).details, ['Unknown field - extra', 'Invalid email address - email', 'Password must be at least 8 characters - password'],
    'a few unknown fields are reported with every other failing field')
})

// The largest body each operation's schema allows, written the costliest way JSON allows:
// every character of every string at its maximum length outside ASCII and escaped as a
// surrogate pair (as clients that escape non-ASCII write it), pretty-printed.
interface Schema { $ref?: string, type?: string | string[], properties?: Record<string, Schema>, maxLength?: number, enum?: unknown[], const?: unknown, anyOf?: Schema[], format?: string }

function largest (schema: Schema, components: Record<string, Schema>): unknown {
  if (schema.$ref !== undefined) return largest(components[schema.$ref.split('/').at(-1)!]!, components)
  if (schema.const !== undefined) return schema.const
  if (schema.enum !== undefined) return schema.enum.reduce((a, b) => JSON.stringify(b).length > JSON.stringify(a).length ? b : a)
  if (schema.anyOf !== undefined) return largest(schema.anyOf[0]!, components)
  const type = [schema.type].flat()[0]
  if (type === 'object') return Object.fromEntries(Object.entries(schema.properties ?? {}).map(([key, value]) => [key, largest(value, components)]))
  if (type === 'string') return '\u{1F600}'.repeat(schema.maxLength ?? 0)
  if (type === 'integer' || type === 'number') return -2147483648
  if (type === 'boolean') return false
  return null
}
const escapeAll = (text: string) => text.replace(/[^\x20-\x7e\n]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)

t.test('the largest valid body of every operation fits its limit', async (t) => {
  const app = await sharedApp()
  const user = await registerUser(app)
  const openapi = (await app.inject({ method: 'GET', url: '/openapi.json' })).json() as {
    paths: Record<string, Record<string, { requestBody?: { content: Record<string, { schema: Schema }> } }>>
    components: { schemas: Record<string, Schema> }
  }
  let checked = 0
  for (const [path, operations] of Object.entries(openapi.paths)) {
    for (const [method, operation] of Object.entries(operations)) {
      const schema = operation.requestBody?.content['application/json']?.schema
      if (schema === undefined || path === '/webhooks/payment') continue
      const payload = escapeAll(JSON.stringify(largest(schema, openapi.components.schemas), null, 2))
      const res = await app.inject({ method: method.toUpperCase() as 'POST', url: path.replace('{id}', '1'), headers: { ...user.auth, 'content-type': 'application/json' }, payload })
      t.not(res.statusCode, 413, `${method.toUpperCase()} ${path}: ${payload.length} bytes`)
      checked++
    }
  }
  t.ok(checked >= 12, `${checked} operations checked`)
})
