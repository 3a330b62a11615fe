// Response serializers compiled once per distinct schema (server-options.ts): every route
// documents the same error envelopes, and each copy used to be compiled again at start-up.
import t from 'tap'
import { serializersOncePerSchema } from '../../server-options.js'

const envelope = () => ({ type: 'object', properties: { success: { type: 'boolean' }, error: { type: 'string' } } })
const route = (schema: object, url: string, httpStatus = '400') => ({ schema, method: 'GET', url, httpStatus })

t.test('one serializer for the same schema on every route and status, another for another schema', async (t) => {
  const build = serializersOncePerSchema()(({}), {})
  const a = build(route(envelope(), '/tasks'))
  const b = build(route(envelope(), '/preferences', '401'))
  t.equal(a, b, 'an equal schema, another route and status: the same compiled function')
  t.equal(a({ success: false, error: 'Nope', extra: 'dropped' }), '{"success":false,"error":"Nope"}', 'and it serializes as the schema says')
  const other = build(route({ type: 'object', properties: { success: { type: 'boolean' } } }, '/tasks'))
  t.not(other, a)
  t.equal(other({ success: true, error: 'x' }), '{"success":true}')
})

t.test('a context with other shared schemas, or other options, gets serializers of its own', async (t) => {
  const factory = serializersOncePerSchema()
  const shared = { Tag: { $id: 'Tag', type: 'object', properties: { name: { type: 'string' } } } }
  const withTag = factory(shared, {})
  const withoutTag = factory({}, {})
  const schema = { type: 'object', properties: { success: { type: 'boolean' } } }
  t.not(withTag(route(schema, '/a')), withoutTag(route(schema, '/a')), 'different shared schemas')
  t.equal(withTag(route(schema, '/a')), factory(shared, {})(route(schema, '/b')), 'the same shared schemas in another context: shared')
  const tagged = withTag(route({ type: 'object', properties: { tag: { $ref: 'Tag#' } } }, '/t'))
  t.equal(tagged({ tag: { name: 'home', secret: 1 } }), '{"tag":{"name":"home"}}', 'a $ref to a shared schema resolves')
  t.not(factory({}, { rounding: 'floor' })(route(schema, '/a')), withoutTag(route(schema, '/a')), 'different serializer options')
  // Sibling contexts may each add a schema under the same $id, with other fields.
  const otherTag = factory({ Tag: { $id: 'Tag', type: 'object', properties: { label: { type: 'string' } } } }, {})
  const retagged = otherTag(route({ type: 'object', properties: { tag: { $ref: 'Tag#' } } }, '/t'))
  t.not(retagged, tagged, 'the same $id with other content: not the other context\'s serializer')
  t.equal(retagged({ tag: { name: 'home', label: 'Home' } }), '{"tag":{"label":"Home"}}', 'its own Tag')
})
