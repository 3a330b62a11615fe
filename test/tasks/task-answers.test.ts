// Each task's stored answer (tasks.answer, migration 2026-11-29T06-00-00_task-answers), which
// GET /tasks joins into its page: what the migration fills in for the tasks already there, and
// what the trigger keeps true for every write, the API's or not.
import { sql } from 'kysely'
import t from 'tap'
import { down, up } from '../../db/migrations/2026-11-29T06-00-00_task-answers.js'
import { build, json, registerUser, type TestUser } from '../support/helper.js'

t.test('stored answers', async (t) => {
  const app = await build(t)
  const user = await registerUser(app)
  const create = async (who: TestUser, payload: Record<string, unknown>) => {
    const res = await app.inject({ method: 'POST', url: '/tasks', headers: who.auth, payload })
    t.equal(res.statusCode, 201)
    return json(res).data as { id: number }
  }
  const page = async (who: TestUser) => {
    const res = await app.inject({ method: 'GET', url: '/tasks', headers: who.auth })
    t.equal(res.statusCode, 200)
    return json(res).data as Array<Record<string, unknown>>
  }
  const one = async (who: TestUser, id: number) => json(await app.inject({ method: 'GET', url: `/tasks/${id}`, headers: who.auth })).data
  const stored = async (id: number) => (await sql<{ answer: string }>`select answer from tasks where id = ${id}`.execute(app.db)).rows[0]!.answer

  const first = await create(user, { title: 'before "the" migration', description: 'line\nbreak', status: 'completed', dueDate: '2027-03-04T05:06:07.089Z' })
  const second = await create(user, { title: 'another' })

  t.test('the migration fills in the answers of the tasks already there, as the API writes them', async (t) => {
    await app.db.transaction().execute(async (trx) => {
      await down(trx)
      await up(trx)
    })
    for (const task of [first, second]) t.equal(await stored(task.id), JSON.stringify(await one(user, task.id)), `task ${task.id}, to the byte`)
    t.same(await page(user), [await one(user, second.id), await one(user, first.id)])
    // The migration's own function of its session is gone with it.
    const left = await sql<{ n: number }>`select count(*)::int as n from pg_proc where proname = 'task_answer'`.execute(app.db)
    t.equal(left.rows[0]!.n, 0)
  })

  t.test('a write around the API keeps the answer true; an answer written directly is replaced', async (t) => {
    await sql`update tasks set title = 'renamed in SQL', answer = '{"forged":true}' where id = ${first.id}`.execute(app.db)
    t.match(await one(user, first.id), { title: 'renamed in SQL' })
    t.equal(await stored(first.id), JSON.stringify(await one(user, first.id)))
    await sql`insert into tasks (user_id, title, answer) values (${user.id}, 'inserted in SQL', 'forged')`.execute(app.db)
    const [newest] = await page(user)
    t.match(newest, { title: 'inserted in SQL', status: 'todo', description: null })
    t.same(newest, await one(user, newest!.id as number))
  })

  // POST /tasks sends the new task's stored answer in its envelope, as text: the same bytes
  // GET /tasks/:id serializes, whichever statement wrote it (with an Idempotency-Key the hook
  // checks the token and the plain insert runs; without, the statement that checks it too).
  t.test('POST /tasks answers the bytes GET /tasks/:id answers', async (t) => {
    const bodies = [
      { title: '  "quoted" \\ and \u2028 and emoji \ud83d\ude00  ', description: 'tab\there', status: 'completed', dueDate: '2027-01-02T03:04:05.006+02:00' },
      { title: 'plain', description: null, dueDate: null },
      { title: 'in progress', status: 'in-progress' }
    ]
    for (const [i, payload] of bodies.entries()) {
      for (const key of [undefined, `answer-${i}`]) {
        const res = await app.inject({ method: 'POST', url: '/tasks', headers: { ...user.auth, ...(key && { 'idempotency-key': key }) }, payload })
        t.equal(res.statusCode, 201)
        t.equal(res.headers['content-type'], 'application/json; charset=utf-8')
        const id = (json(res).data as { id: number }).id
        const read = await app.inject({ method: 'GET', url: `/tasks/${id}`, headers: user.auth })
        t.equal(res.body, read.body, `body ${i}${key ? ', with a key' : ''}: to the byte`)
      }
    }
  })

  t.test('a PATCH shows in the page at once', async (t) => {
    const res = await app.inject({ method: 'PATCH', url: `/tasks/${second.id}`, headers: user.auth, payload: { status: 'in-progress' } })
    t.equal(res.statusCode, 200)
    t.same((await page(user)).find((task) => task.id === second.id), json(res).data)
  })
})
