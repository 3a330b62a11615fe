// What a newcomer meets at the service's address: GET / says where to go, /favicon.ico is no
// 404, neither is part of the documented API, and the document's version is package.json's.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { json, sharedApp } from '../support/helper.js'
import { PROJECT_ROOT } from '../support/paths.js'

const app = await sharedApp()
const { version } = JSON.parse(readFileSync(join(PROJECT_ROOT, 'package.json'), 'utf8')) as { version: string }

t.test('GET / answers 200 in the envelope, pointing to the reference page and the health check', async (t) => {
  const res = await app.inject({ method: 'GET', url: '/' })
  t.equal(res.statusCode, 200)
  t.match(res.headers['content-type'], /^application\/json/)
  t.same(json(res), { success: true, data: { docs: '/docs', openapi: '/openapi.json', health: '/health' } })
  t.equal((await app.inject({ method: 'GET', url: json(res).data.health })).statusCode, 200, 'the health check it names answers')
})

t.test('/favicon.ico answers 204, kept a day, so the reference page logs no 404', async (t) => {
  const res = await app.inject({ method: 'GET', url: '/favicon.ico' })
  t.equal(res.statusCode, 204)
  t.equal(res.body, '')
  t.equal(res.headers['cache-control'], 'public, max-age=86400')
})

t.test('neither is in the OpenAPI document', async (t) => {
  const doc = json(await app.inject({ method: 'GET', url: '/openapi.json' }))
  t.notOk('/' in doc.paths, 'GET / is not part of the API')
  t.notOk('/favicon.ico' in doc.paths)
})

t.test('the document\'s version is package.json\'s, served and committed', async (t) => {
  const doc = json(await app.inject({ method: 'GET', url: '/openapi.json' }))
  t.equal(doc.info.version, version, 'served document')
  const committed = JSON.parse(readFileSync(join(PROJECT_ROOT, 'openapi.json'), 'utf8')) as { info: { version: string } }
  t.equal(committed.info.version, version, 'committed openapi.json')
})

t.test('the reference page\'s Test Request sends no filter unasked: an optional enum parameter\'s examples are disabled', async (t) => {
  // Scalar fills an optional query parameter with its example, else its enum's first value, and
  // sends it unless the example is marked x-disabled: GET /tasks went out as ?status=todo.
  const doc = json(await app.inject({ method: 'GET', url: '/openapi.json' }))
  let checked = 0
  for (const [path, operations] of Object.entries(doc.paths as Record<string, Record<string, { parameters?: any[] }>>)) {
    for (const [method, operation] of Object.entries(operations)) {
      for (const parameter of operation.parameters ?? []) {
        const schema = typeof parameter.schema?.$ref === 'string' ? doc.components.schemas[parameter.schema.$ref.split('/').at(-1)] : parameter.schema
        if (parameter.in !== 'query' || parameter.required || schema?.enum === undefined) continue
        const examples = Object.values(parameter.examples ?? {}) as Array<{ 'x-disabled'?: boolean }>
        t.ok(examples.length > 0 && examples.every((example) => example['x-disabled'] === true), `${method} ${path} ?${parameter.name}`)
        checked++
      }
    }
  }
  t.ok(checked >= 1, 'GET /tasks ?status among them')
})
