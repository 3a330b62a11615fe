// Routes without query parameters are checked without ajv (plugins/validation.ts,
// noQueryParameters): held here to the errors ajv gives for the same schema, with the
// options the plugin compiles query strings with, so a refusal reads as it always did.
import { Ajv } from 'ajv'
import t from 'tap'
import { noQueryParameters } from '../../plugins/validation.js'
import { json, registerUser, sharedApp } from '../support/helper.js'

const NO_QUERY = { type: 'object', properties: {}, additionalProperties: false }
const ajv = new Ajv({ allErrors: true, verbose: true, coerceTypes: 'array', useDefaults: true, removeAdditional: false })
const compiled = ajv.compile(NO_QUERY)
// What the error handler reads of an error (errors.ts): not ajv's verbose `schema` and `data`.
const read = (errors: unknown[] | null | undefined) => (errors ?? []).map((error) => {
  const { instancePath, schemaPath, keyword, params, message, parentSchema } = error as Record<string, unknown>
  return { instancePath, schemaPath, keyword, params, message, parentSchema }
})

t.test('the same verdict and errors as ajv compiling { type: object, properties: {}, additionalProperties: false }', async (t) => {
  const queries: Array<Record<string, unknown>> = [{}, { a: '1' }, { a: '1', b: ['x', 'y'] }, { constructor: 'x', __proto__x: '' }, Object.assign(Object.create(null), { t: '' })]
  for (const query of queries) {
    const expected = compiled(structuredClone({ ...query }))
    t.equal(noQueryParameters({ ...query }), expected, JSON.stringify(query))
    t.same(read((noQueryParameters as unknown as { errors: unknown[] | null }).errors), read(compiled.errors), `errors for ${JSON.stringify(query)}`)
  }
})

t.test('over HTTP: a route without query parameters refuses each unknown one, the probes take any', async (t) => {
  const app = await sharedApp()
  const user = await registerUser(app)
  const res = await app.inject({ method: 'GET', url: '/preferences?fields=plan&expand=all', headers: user.auth })
  t.equal(res.statusCode, 400)
  t.same(json(res), { success: false, error: 'Validation failed', code: 'VALIDATION_FAILED', details: ['Unknown field - fields', 'Unknown field - expand'] })
  t.equal((await app.inject({ method: 'GET', url: '/health?t=1&verbose' })).statusCode, 200)
})
