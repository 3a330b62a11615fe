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
