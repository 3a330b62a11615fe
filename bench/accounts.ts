// The users the scenarios act as: seeded straight into the database with their tasks (one
// bcrypt hash, shared), then signed in through POST /auth/login for their tokens.
import bcrypt from 'bcryptjs'
import { log, step } from './log.js'
import { JSON_HEADERS } from './requests.js'
import { emailOf, PASSWORD, seed, SPECIAL, taskIdsOf, userIds } from './seed.js'
import type { Service } from './service.js'
import type { Accounts, Settings } from './types.js'

/** Tasks of each writer that tasks.update patches in turn. */
const TASKS_PER_WRITER = 25

/** A token for `email` (the seeded password), through POST /auth/login. */
export async function login (url: string, email: string): Promise<string> {
  const res = await fetch(`${url}/auth/login`, { method: 'POST', headers: JSON_HEADERS, body: JSON.stringify({ email, password: PASSWORD }) })
  const body = await res.json() as { token?: string }
  if (res.status !== 200 || typeof body.token !== 'string') throw new Error(`login of ${email}: ${res.status} ${JSON.stringify(body)}`)
  return body.token
}

/** Runs async tasks at most `limit` at a time. */
async function inParallel<T, R> (items: T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array(items.length)
  let next = 0
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const i = next++
      results[i] = await fn(items[i]!)
    }
  }))
  return results
}

/** Seeds `settings.users` × `settings.tasksPerUser` and signs the readers, writers and SPECIAL users in. */
export async function seedAndSignIn (service: Service, settings: Settings): Promise<Accounts> {
  step(`seeding ${settings.users} users × ${settings.tasksPerUser} tasks`)
  let t = Date.now()
  const passwordHash = await bcrypt.hash(PASSWORD, 12)
  const readerEmails = Array.from({ length: settings.readers }, (_, i) => emailOf(i + 1))
  const writerEmails = Array.from({ length: settings.writers }, (_, i) => emailOf(settings.readers + i + 1))
  const specialEmails = Object.values(SPECIAL)
  const ids = await service.withSql(async (sql) => {
    await seed(sql, { users: settings.users, tasksPerUser: settings.tasksPerUser, customers: settings.customers, passwordHash })
    return userIds(sql, [...writerEmails, ...specialEmails])
  })
  const idOf = (email: string) => { const id = ids.get(email); if (id === undefined) throw new Error(`no user ${email}`); return id }
  const writerTasks = await service.withSql(async (sql) => {
    const lists: number[][] = []
    for (const email of writerEmails) lists.push(await taskIdsOf(sql, idOf(email), TASKS_PER_WRITER))
    return lists
  })
  log(`  seeded in ${Date.now() - t} ms`)

  t = Date.now()
  const allEmails = [...readerEmails, ...writerEmails, ...specialEmails]
  const tokens = new Map(await inParallel(allEmails, 4, async (email) => [email, await login(service.url, email)] as const))
  const token = (email: string) => tokens.get(email)!
  log(`  ${tokens.size} users logged in through POST /auth/login in ${Date.now() - t} ms`)
  return { readerTokens: readerEmails.map(token), writerEmails, writerTasks, token, idOf }
}
