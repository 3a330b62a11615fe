// Users whose data was written through the API, as a newcomer's would be: registered with
// POST /auth/register, signed in with POST /auth/login, their tasks created one by one with
// POST /tasks. health.underLoad runs its GET /tasks load as these users (issue 30: seeded
// straight into the database, the embedded database served twice what it served on data
// the API had written, and the lone probe hid a 6× slower p99 on PostgreSQL). 20 users
// over 50 connections also means connections share a user, as a real client's tabs do.
import { randomBytes } from 'node:crypto'
import { log, step } from './log.js'
import { bearer, JSON_HEADERS } from './requests.js'
import type { Service } from './service.js'

export const API_USERS = 20
export const API_TASKS_PER_USER = 50
const PASSWORD = 'bench-api-seeded-password'

async function post (url: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number, body: Record<string, unknown> }> {
  const res = await fetch(url, { method: 'POST', headers: { ...JSON_HEADERS, ...headers }, body: JSON.stringify(body) })
  return { status: res.status, body: await res.json() as Record<string, unknown> }
}

/**
 * Registers API_USERS users, signs each in, and creates API_TASKS_PER_USER tasks for each,
 * all through the API (four users at a time); returns the signed-in tokens.
 */
export async function seedThroughApi (service: Service): Promise<string[]> {
  step(`seeding through the API: ${API_USERS} users registered and signed in, ${API_TASKS_PER_USER} tasks each with POST /tasks`)
  const t = Date.now()
  const run = randomBytes(4).toString('hex')
  const tokens: string[] = new Array(API_USERS)
  let next = 0
  await Promise.all(Array.from({ length: 4 }, async () => {
    while (next < API_USERS) {
      const i = next++
      const email = `api-${run}-${i}@bench.example`
      const registered = await post(`${service.url}/auth/register`, { name: `API user ${i}`, email, password: PASSWORD })
      if (registered.status !== 201) throw new Error(`POST /auth/register: ${registered.status} ${JSON.stringify(registered.body)}`)
      const signedIn = await post(`${service.url}/auth/login`, { email, password: PASSWORD })
      if (signedIn.status !== 200 || typeof signedIn.body.token !== 'string') throw new Error(`POST /auth/login: ${signedIn.status} ${JSON.stringify(signedIn.body)}`)
      const token = signedIn.body.token
      for (let n = 0; n < API_TASKS_PER_USER; n++) {
        const created = await post(`${service.url}/tasks`, { title: `Task ${n} of user ${i}`, description: 'Written through the API by npm run bench', status: n % 3 === 0 ? 'completed' : 'todo' }, bearer(token))
        if (created.status !== 201) throw new Error(`POST /tasks: ${created.status} ${JSON.stringify(created.body)}`)
      }
      tokens[i] = token
    }
  }))
  log(`  seeded through the API in ${Date.now() - t} ms`)
  return tokens
}
