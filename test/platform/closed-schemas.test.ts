// Bodies and query strings are closed by default (plugins/validation.ts): a route whose
// schema would accept unknown fields, because an object in it does not say
// `additionalProperties: false`, stops the app at start-up. On a bare Fastify with the
// shared schemas and the validation plugin.
import Fastify, { type FastifyInstance, type FastifySchema } from 'fastify'
import t, { type Test } from 'tap'
import { Type } from 'typebox'
import sharedSchemas from '../../plugins/shared-schemas.js'
import validation from '../../plugins/validation.js'
import { ref } from '../../schemas/common.js'
import { CreateTaskBody } from '../../schemas/tasks.js'

// Not async: a Fastify instance is a thenable (its ready()), which an async function would await.
function appWith (schema: FastifySchema): FastifyInstance {
  const app = Fastify({ logger: false })
  app.register(sharedSchemas)
  app.register(validation)
  app.register(async (routes) => {
    routes.post('/thing', { schema }, async () => ({ ok: true }))
  })
  return app
}

const refused = async (t: Test, schema: FastifySchema, message: RegExp, what: string) => {
  const app = appWith(schema)
  await t.rejects(async () => { await app.ready() }, message, what)
  await app.close().catch(() => {})
}

t.test('a body that leaves unknown fields unsaid is refused at start-up, naming where', async (t) => {
  await refused(t, { body: Type.Object({ name: Type.String() }) }, /^POST \/thing: its body schema accepts unknown fields at \/; add additionalProperties: false/, 'the body itself')
  await refused(t, {
    body: Type.Object({ address: Type.Object({ city: Type.String() }) }, { additionalProperties: false })
  }, /accepts unknown fields at \/address;/, 'an object inside a closed body')
  await refused(t, {
    body: Type.Object({ lines: Type.Array(Type.Object({ text: Type.String() })) }, { additionalProperties: false })
  }, /accepts unknown fields at \/lines\/\[\];/, 'an object in an array')
  await refused(t, {
    body: Type.Union([Type.Object({ a: Type.String() }, { additionalProperties: false }), Type.Object({ b: Type.String() })])
  }, /accepts unknown fields at \/;/, 'one branch of a union')
})

t.test('a query string that leaves unknown parameters unsaid is refused too', async (t) => {
  await refused(t, { querystring: Type.Object({ limit: Type.Optional(Type.Integer()) }) }, /its querystring schema accepts unknown fields at \//, 'an open query')
})

t.test('closed bodies, shared ones by reference, and bodies open on purpose start', async (t) => {
  for (const [what, schema] of [
    ['closed', { body: Type.Object({ name: Type.String() }, { additionalProperties: false }) }],
    ['a shared schema by $ref', { body: ref(CreateTaskBody) }],
    ['open on purpose (additionalProperties: true)', { body: Type.Object({}, { additionalProperties: true }) }],
    ['no body, no query (the query is closed for the route)', {}]
  ] as const) {
    const app = appWith(schema)
    await t.resolves(async () => { await app.ready() }, what)
    await app.close()
  }
  // What was opened on purpose accepts unknown fields; what is closed refuses them.
  const open = appWith({ body: Type.Object({}, { additionalProperties: true }) })
  t.teardown(() => open.close())
  t.equal((await open.inject({ method: 'POST', url: '/thing', payload: { anything: 1 } })).statusCode, 200, 'open: accepted')
  const closed = appWith({ body: Type.Object({ name: Type.String() }, { additionalProperties: false }) })
  t.teardown(() => closed.close())
  t.equal((await closed.inject({ method: 'POST', url: '/thing', payload: { name: 'a', anything: 1 } })).statusCode, 400, 'closed: refused')
})
