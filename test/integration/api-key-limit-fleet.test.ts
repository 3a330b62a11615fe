// The per-key limit across a fleet (docs/api-keys.md): two instances of the app on one
// PostgreSQL database and one Redis count a key's requests together, so a script spread over
// the balancer's instances gets API_KEY_RATE_LIMIT_MAX a minute in all, not that many per
// instance; and a key revoked through one instance is refused by the other at once.
import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { build, json, randomAddress, registerUser, serverDatabase } from '../support/helper.js'

const { url } = await serverDatabase(t, 'api_key_fleet')
const env = { DATABASE_URL: url.toString(), REDIS_URL: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', API_KEY_RATE_LIMIT_MAX: '10' }
const [a, b] = await Promise.all([build(t, env), build(t, env)]) as [FastifyInstance, FastifyInstance]

const get = (on: FastifyInstance, key: string) =>
  on.inject({ method: 'GET', url: '/tasks', remoteAddress: randomAddress(), headers: { authorization: `Bearer ${key}` } })

async function keyFor (on: FastifyInstance): Promise<{ id: string, key: string, auth: Record<string, string> }> {
  const user = await registerUser(on)
  const res = await on.inject({ method: 'POST', url: '/account/api-keys', headers: user.auth, payload: { name: 'fleet', scopes: ['tasks:read'] } })
  return { id: json(res).data.id, key: json(res).key, auth: user.auth }
}

t.test('ten requests a minute in all, over two instances sharing Redis', async (t) => {
  const { key } = await keyFor(a)
  const statuses: number[] = []
  // Five on each, one after the other: alone, either instance would allow ten.
  for (let i = 0; i < 10; i++) statuses.push((await get(i < 5 ? a : b, key)).statusCode)
  t.same(statuses, Array(10).fill(200), 'ten answered, five by each')
  for (const on of [a, b]) {
    const over = await get(on, key)
    t.equal(over.statusCode, 429, 'the eleventh refused, by either instance')
    t.equal(json(over).code, 'RATE_LIMITED')
    t.ok(Number(over.headers['retry-after']) >= 1 && Number(over.headers['retry-after']) <= 60, 'with Retry-After')
  }
  const concurrent = await keyFor(b)
  const answers = await Promise.all(Array.from({ length: 16 }, (_, i) => get(i % 2 === 0 ? a : b, concurrent.key)))
  t.equal(answers.filter((res) => res.statusCode === 200).length, 10, 'sixteen at once over both: ten answered, whatever the order')
})

t.test('revoked through one instance, refused by the other at once', async (t) => {
  const { id, key, auth } = await keyFor(a)
  t.equal((await get(b, key)).statusCode, 200)
  t.equal((await a.inject({ method: 'DELETE', url: `/account/api-keys/${id}`, headers: auth })).statusCode, 200)
  t.equal((await get(b, key)).statusCode, 401)
})
