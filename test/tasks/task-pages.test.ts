// GET /tasks pages bounded in bytes (issue 22 row 16): a page ends before its tasks' JSON
// would pass PAGE_BYTES, however long the descriptions, and says where the next one starts;
// following those pointers gives every task once, in order. A normal user's page is as before.
import type { LightMyRequestResponse } from 'fastify'
import t from 'tap'
import { PAGE_BYTES } from '../../db/tasks.js'
import { json, registerUser, sharedApp, type TestUser } from '../support/helper.js'

const app = await sharedApp()

const list = (user: TestUser, url = '/tasks') => app.inject({ method: 'GET', url, headers: user.auth })
const jsonBytes = (value: unknown) => Buffer.byteLength(JSON.stringify(value))

/** The URL of a `Link: <url>; rel="next"` header, or undefined without one. */
function nextLink (res: LightMyRequestResponse): string | undefined {
  const link = res.headers.link
  if (link === undefined) return undefined
  const match = /^<([^>]+)>; rel="next"$/.exec(String(link))
  if (match === null) throw new Error(`not a next link: ${String(link)}`)
  return match[1]
}

/**
 * `count` tasks straight into the table, each with the longest description the API takes
 * (10,000 characters): every third in a three-byte character, so bytes and characters differ.
 * Tasks come in threes sharing a created_at, so the id decides their order, across pages too.
 * Returns their ids newest first, as GET /tasks orders them.
 */
async function addLongTasks (user: TestUser, count: number): Promise<number[]> {
  const start = Date.parse('2026-01-01T00:00:00.000Z')
  const rows = Array.from({ length: count }, (_, i) => ({
    user_id: user.id,
    title: `Long task ${i}`,
    description: (i % 3 === 0 ? '€' : 'd').repeat(10_000),
    status: i % 2 === 0 ? 'todo' as const : 'completed' as const,
    created_at: new Date(start + Math.floor(i / 3) * 1000),
    updated_at: new Date(start)
  }))
  const inserted = await app.db.insertInto('tasks').values(rows).returning(['id', 'created_at']).execute()
  return inserted
    .sort((a, b) => Date.parse(b.created_at) - Date.parse(a.created_at) || b.id - a.id)
    .map((row) => row.id)
}

/** Follows the Link headers from `url`; every page's answer, in order. */
async function allPages (user: TestUser, url: string): Promise<LightMyRequestResponse[]> {
  const pages: LightMyRequestResponse[] = []
  for (let next: string | undefined = url; next !== undefined; next = nextLink(pages.at(-1)!)) {
    if (pages.length > 50) throw new Error('more than 50 pages: the pointers do not advance')
    pages.push(await list(user, next))
  }
  return pages
}

t.test('a default page of long tasks ends before PAGE_BYTES and points to the next', async (t) => {
  const heavy = await registerUser(app)
  const ids = await addLongTasks(heavy, 240)

  const first = await list(heavy)
  t.equal(first.statusCode, 200)
  const body = json(first)
  t.same(Object.keys(body).sort(), ['completed', 'data', 'inProgress', 'nextOffset', 'success', 'todo', 'total'])
  t.match(body, { success: true, total: 240, todo: 120, inProgress: 0, completed: 120 }, 'the counts are of every task, as before')
  t.equal(first.headers['x-total-count'], '240')
  const size = jsonBytes(body.data)
  t.ok(size <= PAGE_BYTES, `the page's tasks are ${size} bytes of JSON, within ${PAGE_BYTES}`)
  t.ok(size > PAGE_BYTES * 0.9, `the page is not cut much short of the budget (${size} bytes)`)
  t.ok(body.data.length > 1 && body.data.length < 240, `${body.data.length} of 240 tasks`)
  t.same(body.data.map((task: { id: number }) => task.id), ids.slice(0, body.data.length), 'the newest tasks, in order')
  t.equal(body.nextOffset, body.data.length, 'the next page starts after this one')
  t.equal(nextLink(first), `/tasks?limit=1000&offset=${body.data.length}`)

  const pages = await allPages(heavy, '/tasks')
  t.ok(pages.length >= 4, `${pages.length} pages`)
  const seen = pages.flatMap((page) => json(page).data.map((task: { id: number }) => task.id))
  t.same(seen, ids, 'following the pointers gives every task exactly once, newest first')
  pages.forEach((page, i) => {
    const pageBody = json(page)
    t.equal(page.statusCode, 200)
    t.ok(jsonBytes(pageBody.data) <= PAGE_BYTES, `page ${i + 1}: ${jsonBytes(pageBody.data)} bytes`)
    t.match(pageBody, { total: 240, todo: 120, completed: 120 })
    t.equal(page.headers['x-total-count'], '240')
  })
  const last = pages.at(-1)!
  t.notOk('nextOffset' in json(last), 'the last page has no nextOffset')
  t.equal(last.headers.link, undefined, 'and no Link header')
})

t.test('the pointer keeps the filter and the limit', async (t) => {
  const heavy = await registerUser(app)
  const ids = await addLongTasks(heavy, 240)
  const completed = new Set((await app.db.selectFrom('tasks').select('id').where('user_id', '=', heavy.id).where('status', '=', 'completed').execute()).map((row) => row.id))

  const filtered = await list(heavy, '/tasks?status=completed')
  t.match(json(filtered), { total: 120, todo: 120, completed: 120 })
  t.ok(jsonBytes(json(filtered).data) <= PAGE_BYTES)
  const offset = json(filtered).data.length
  t.equal(nextLink(filtered), `/tasks?status=completed&limit=1000&offset=${offset}`)
  const seen = (await allPages(heavy, '/tasks?status=completed')).flatMap((page) => json(page).data.map((task: { id: number }) => task.id))
  t.same(seen, ids.filter((id) => completed.has(id)), 'every completed task once, in order')

  // A page that `limit` ends (well within the budget) points on too, with the same limit.
  const limited = await list(heavy, '/tasks?limit=20&offset=40')
  t.same(json(limited).data.map((task: { id: number }) => task.id), ids.slice(40, 60))
  t.equal(json(limited).nextOffset, 60)
  t.equal(nextLink(limited), '/tasks?limit=20&offset=60')
  const end = await list(heavy, '/tasks?limit=20&offset=220')
  t.equal(json(end).data.length, 20)
  t.equal(end.headers.link, undefined, 'the page that reaches the last task has no pointer')
  t.notOk('nextOffset' in json(end))
})

t.test('a task larger than the budget still makes a page of one', async (t) => {
  // Larger than the API accepts (10,000 characters), stored directly: the page holds it
  // rather than nothing, and the pointer still moves on.
  const heavy = await registerUser(app)
  await app.db.insertInto('tasks').values([
    { user_id: heavy.id, title: 'older', description: 'x'.repeat(10), created_at: new Date('2026-01-01T00:00:00Z'), updated_at: new Date() },
    { user_id: heavy.id, title: 'huge', description: 'x'.repeat(PAGE_BYTES + 1), created_at: new Date('2026-01-02T00:00:00Z'), updated_at: new Date() }
  ]).execute()
  const first = await list(heavy)
  t.same(json(first).data.map((task: { title: string }) => task.title), ['huge'])
  t.equal(json(first).nextOffset, 1)
  const second = await list(heavy, nextLink(first))
  t.same(json(second).data.map((task: { title: string }) => task.title), ['older'])
  t.equal(second.headers.link, undefined)
})

t.test('a normal user\'s page is unchanged: every task, no pointer', async (t) => {
  const user = await registerUser(app)
  for (const title of ['one', 'two', 'three']) {
    const res = await app.inject({ method: 'POST', url: '/tasks', headers: user.auth, payload: { title, description: 'A line of text' } })
    t.equal(res.statusCode, 201)
  }
  const res = await list(user)
  t.equal(res.statusCode, 200)
  t.same(Object.keys(json(res)).sort(), ['completed', 'data', 'inProgress', 'success', 'todo', 'total'])
  t.same(json(res).data.map((task: { title: string }) => task.title), ['three', 'two', 'one'])
  t.equal(res.headers.link, undefined)

  // 1,000 tasks with a sentence each are one page, as the origin dashboard expects.
  await app.db.insertInto('tasks')
    .values(Array.from({ length: 997 }, (_, i) => ({ user_id: user.id, title: `Task ${i}: prepare the weekly report`, description: 'Gather the figures, draft the summary, review it with the team and send it out.', updated_at: new Date() })))
    .execute()
  const full = await list(user)
  t.equal(json(full).data.length, 1000)
  t.equal(json(full).total, 1000)
  t.equal(full.headers.link, undefined)
  t.notOk('nextOffset' in json(full))
})
