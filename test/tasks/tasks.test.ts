// The /tasks routes (docs/api.md): envelopes, validation, completedAt rules,
// listing and pagination, and that another user's task is indistinguishable from none.
import type { LightMyRequestResponse } from 'fastify'
import { sql } from 'kysely'
import t from 'tap'
import { json, registerUser, sharedApp, type TestUser } from '../support/helper.js'

const app = await sharedApp()
const owner = await registerUser(app)
const other = await registerUser(app)

const TASK_KEYS = ['completedAt', 'createdAt', 'description', 'dueDate', 'id', 'status', 'title', 'updatedAt']
const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/
const NOT_FOUND = { success: false, error: 'Task not found', code: 'TASK_NOT_FOUND' }
const LONG_AGO = '2020-01-01T00:00:00.000Z'

type Assert = Pick<typeof t, 'equal' | 'same' | 'match' | 'ok'>

async function createTask (user: TestUser, payload: Record<string, unknown>): Promise<Record<string, any>> {
  const res = await app.inject({ method: 'POST', url: '/tasks', headers: user.auth, payload })
  if (res.statusCode !== 201) throw new Error(`create failed: ${res.statusCode} ${res.body}`)
  return json(res).data
}

const taskRow = (id: number) => app.db.selectFrom('tasks').selectAll().where('id', '=', id).executeTakeFirst()

async function countRows (table: 'tasks' | 'usage_events', userId: string): Promise<number> {
  const row = await app.db.selectFrom(table)
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('user_id', '=', userId)
    .executeTakeFirstOrThrow()
  return Number(row.n)
}

async function countOwnTasks (userId: string, status?: 'completed'): Promise<number> {
  let query = app.db.selectFrom('tasks').select((eb) => eb.fn.countAll<string>().as('n')).where('user_id', '=', userId)
  if (status) query = query.where('status', '=', status)
  return Number((await query.executeTakeFirstOrThrow()).n)
}

/** A 400 Validation failed whose one detail names `field`. */
function assertValidationFailed (t: Assert, res: LightMyRequestResponse, field: string) {
  t.equal(res.statusCode, 400)
  const body = json(res)
  t.same(Object.keys(body).sort(), ['code', 'details', 'error', 'success'])
  t.equal(body.success, false)
  t.equal(body.error, 'Validation failed')
  t.equal(body.details.length, 1, JSON.stringify(body.details))
  t.match(body.details[0], new RegExp(` - ${field}$`))
}

t.test('POST /tasks', async (t) => {
  t.test('201 with exactly the task keys and defaults', async (t) => {
    const res = await app.inject({ method: 'POST', url: '/tasks', headers: owner.auth, payload: { title: 'Write the report' } })
    t.equal(res.statusCode, 201)
    t.match(res.headers['content-type'], /^application\/json/)
    const body = json(res)
    t.same(Object.keys(body).sort(), ['data', 'success'])
    t.equal(body.success, true)
    const task = body.data
    t.same(Object.keys(task).sort(), TASK_KEYS)
    t.match(task, {
      id: Number,
      title: 'Write the report',
      description: null,
      status: 'todo',
      dueDate: null,
      completedAt: null,
      createdAt: ISO,
      updatedAt: ISO
    })
    t.ok(Number.isInteger(task.id) && task.id > 0)

    const row = await taskRow(task.id)
    t.match(row, { user_id: owner.id, title: 'Write the report', description: null, status: 'todo', due_date: null, completed_at: null })
    t.equal(row?.created_at, task.createdAt)
    t.equal(row?.updated_at, task.updatedAt)
  })

  t.test('title is trimmed; description and dueDate round-trip; dueDate normalised to ISO UTC', async (t) => {
    const task = await createTask(owner, { title: '  Buy milk  ', description: 'Two litres', status: 'in-progress', dueDate: '2026-12-01T10:30:00+01:00' })
    t.match(task, { title: 'Buy milk', description: 'Two litres', status: 'in-progress', dueDate: '2026-12-01T09:30:00.000Z', completedAt: null })
    const row = await taskRow(task.id)
    t.equal(row?.title, 'Buy milk')
    t.equal(row?.due_date, '2026-12-01T09:30:00.000Z')

    const fetched = await app.inject({ method: 'GET', url: `/tasks/${task.id}`, headers: owner.auth })
    t.same(json(fetched), { success: true, data: task })
  })

  t.test('explicit nulls for description and dueDate are accepted', async (t) => {
    const task = await createTask(owner, { title: 'Nulls', description: null, dueDate: null })
    t.match(task, { description: null, dueDate: null })
    t.match(await taskRow(task.id), { description: null, due_date: null })
  })

  t.test('completedAt: null is accepted (the origin client sends it); the server sets the value', async (t) => {
    const open = await createTask(owner, { title: 'From the dialog', description: '', status: 'todo', dueDate: null, completedAt: null })
    t.match(open, { status: 'todo', completedAt: null })
    const done = await createTask(owner, { title: 'Done from the dialog', status: 'completed', completedAt: null })
    t.match(done.completedAt, ISO, 'completed on create: the server sets completedAt whatever the body says')
    const patched = await app.inject({ method: 'PATCH', url: `/tasks/${open.id}`, headers: owner.auth, payload: { title: 'Edited', completedAt: null } })
    t.equal(patched.statusCode, 200)
    t.match(json(patched).data, { title: 'Edited', completedAt: null })
    const replaced = await app.inject({ method: 'PUT', url: `/tasks/${done.id}`, headers: owner.auth, payload: { title: 'Replaced', status: 'completed', completedAt: null } })
    t.equal(replaced.statusCode, 200)
    t.equal(json(replaced).data.completedAt, done.completedAt, 'a completed task keeps its completion time')
  })

  t.test('date-times at the edges PostgreSQL keeps are stored and read back', async (t) => {
    const cases: Array<[string, string]> = [
      ['0001-01-01T00:00:00Z', '0001-01-01T00:00:00.000Z'],
      ['9999-12-31T23:59:59.999999Z', '9999-12-31T23:59:59.999Z'],
      ['9999-12-31T23:59:59+14:00', '9999-12-31T09:59:59.000Z'],
      ['2028-02-29T12:00:00.5-05:30', '2028-02-29T17:30:00.500Z'],
      ['2026-06-01 08:00:00z', '2026-06-01T08:00:00.000Z']
    ]
    for (const [sent, stored] of cases) {
      const task = await createTask(owner, { title: 'Edge', dueDate: sent })
      t.equal(task.dueDate, stored, sent)
      t.equal((await taskRow(task.id))?.due_date, stored)
    }
  })

  t.test('status completed on create sets completedAt', async (t) => {
    const task = await createTask(owner, { title: 'Already done', status: 'completed' })
    t.equal(task.status, 'completed')
    t.match(task.completedAt, ISO)
    t.ok(Date.parse(task.completedAt) >= Date.parse(task.createdAt) - 1000, 'completedAt is the creation time, not some old value')
    const row = await taskRow(task.id)
    t.equal(row?.completed_at, task.completedAt)
  })

  t.test('boundaries: 255-char title and 10,000-char description are accepted', async (t) => {
    const title = 'T'.repeat(255)
    const description = 'd'.repeat(10_000)
    const task = await createTask(owner, { title, description })
    t.equal(task.title, title)
    t.equal(task.description, description)
  })

  t.test('records a task_created usage event {userId, taskId}', async (t) => {
    const task = await createTask(owner, { title: 'Tracked' })
    const events = await app.db.selectFrom('usage_events').selectAll()
      .where('name', '=', 'task_created')
      .where('user_id', '=', owner.id)
      .execute()
    const forTask = events.filter((e) => e.properties.taskId === task.id)
    t.equal(forTask.length, 1)
    t.same(forTask[0]?.properties, { userId: owner.id, taskId: task.id })
    t.notOk(JSON.stringify(task).includes('usage'), 'the event never reaches the client')
  })

  t.test('the task and its usage event are written together or not at all', async (t) => {
    const victim = await registerUser(app)
    // A constraint that refuses this user's usage events only (NOT VALID: old rows are not checked),
    // so the second insert of the create fails after the first has run.
    await sql`alter table usage_events add constraint refuse_victim_events check (user_id <> ${sql.lit(victim.id)}) not valid`.execute(app.db)
    t.teardown(() => sql`alter table usage_events drop constraint if exists refuse_victim_events`.execute(app.db))
    const res = await app.inject({ method: 'POST', url: '/tasks', headers: victim.auth, payload: { title: 'Half written?' } })
    t.equal(res.statusCode, 500)
    t.equal(await countRows('tasks', victim.id), 0, 'no task without its usage event')
    t.equal(await countRows('usage_events', victim.id), 0)

    await sql`alter table usage_events drop constraint refuse_victim_events`.execute(app.db)
    const task = await createTask(victim, { title: 'Whole' })
    t.equal(await countRows('tasks', victim.id), 1)
    t.equal(await countRows('usage_events', victim.id), 1, 'one event with the one task')
    t.equal((await taskRow(task.id))?.user_id, victim.id)
  })

  t.test('refused creates: exact errors, nothing stored', async (t) => {
    const cases: Array<{ name: string, payload: Record<string, unknown>, details?: string[], field?: string }> = [
      { name: 'missing title', payload: { description: 'no title' }, details: ['Title is required - title'] },
      { name: 'blank title', payload: { title: '   ' }, details: ['Title is required - title'] },
      { name: 'empty title', payload: { title: '' }, details: ['Title is required - title'] },
      { name: 'title of 256 chars', payload: { title: 'x'.repeat(256) }, field: 'title' },
      { name: 'title null', payload: { title: null }, field: 'title' },
      { name: 'title not a string', payload: { title: 42 }, field: 'title' },
      { name: 'description of 10,001 chars', payload: { title: 'ok', description: 'x'.repeat(10_001) }, field: 'description' },
      { name: 'status outside the three', payload: { title: 'ok', status: 'done' }, field: 'status' },
      { name: 'dueDate not a date-time', payload: { title: 'ok', dueDate: 'tomorrow' }, field: 'dueDate' },
      // Date-times the format allows but PostgreSQL refuses, or stores as something else.
      { name: 'dueDate in year 0', payload: { title: 'ok', dueDate: '0000-06-01T00:00:00Z' }, field: 'dueDate' },
      { name: 'dueDate with offset +23:59', payload: { title: 'ok', dueDate: '2026-06-01T00:00:00+23:59' }, field: 'dueDate' },
      { name: 'dueDate with a long fraction', payload: { title: 'ok', dueDate: `2026-06-01T00:00:00.${'1'.repeat(40)}Z` }, field: 'dueDate' },
      { name: 'dueDate past year 9999 in UTC', payload: { title: 'ok', dueDate: '9999-12-31T23:59:59-14:00' }, field: 'dueDate' },
      { name: 'dueDate before year 1 in UTC', payload: { title: 'ok', dueDate: '0001-01-01T00:00:00+01:00' }, field: 'dueDate' },
      { name: 'dueDate on 29 February 1900 (a century, not leap)', payload: { title: 'ok', dueDate: '1900-02-29T00:00:00Z' }, field: 'dueDate' },
      { name: 'dueDate on 30 February of a leap year', payload: { title: 'ok', dueDate: '2028-02-30T00:00:00Z' }, field: 'dueDate' },
      { name: 'dueDate on 31 April', payload: { title: 'ok', dueDate: '2026-04-31T00:00:00Z' }, field: 'dueDate' },
      { name: 'dueDate on 29 February of a common year', payload: { title: 'ok', dueDate: '2026-02-29T00:00:00Z' }, field: 'dueDate' },
      { name: 'dueDate with a leap second', payload: { title: 'ok', dueDate: '2026-06-30T23:59:60Z' }, field: 'dueDate' },
      // As long as fits a task's body limit (a megabyte is refused as too large: test/platform/hostile-bodies.test.ts).
      { name: 'dueDate of 100 KB', payload: { title: 'ok', dueDate: `2026-06-01T00:00:00${'0'.repeat(100_000)}` }, field: 'dueDate' },
      { name: 'unknown field userId', payload: { title: 'ok', userId: other.id }, details: ['Unknown field - userId'] },
      { name: 'unknown field id', payload: { title: 'ok', id: 1 }, details: ['Unknown field - id'] },
      { name: 'completedAt set by the client', payload: { title: 'ok', completedAt: '2026-01-01T00:00:00.000Z' }, details: ['Is set by the server when the status becomes completed; send null or leave it out - completedAt'] }
    ]
    const otherTasksBefore = await countRows('tasks', other.id)
    for (const c of cases) {
      await t.test(c.name, async (t) => {
        const tasksBefore = await countRows('tasks', owner.id)
        const eventsBefore = await countRows('usage_events', owner.id)
        const res = await app.inject({ method: 'POST', url: '/tasks', headers: owner.auth, payload: c.payload })
        if (c.details) {
          t.equal(res.statusCode, 400)
          t.same(json(res), { success: false, error: 'Validation failed', code: 'VALIDATION_FAILED', details: c.details })
        } else {
          assertValidationFailed(t, res, c.field ?? '')
        }
        t.equal(await countRows('tasks', owner.id), tasksBefore, 'no task stored')
        t.equal(await countRows('usage_events', owner.id), eventsBefore, 'no usage event stored')
      })
    }
    t.equal(await countRows('tasks', other.id), otherTasksBefore, 'nothing stored for the user named in userId')
  })
})

t.test('GET /tasks', async (t) => {
  const lister = await registerUser(app)
  const first = await createTask(lister, { title: 'first' })
  const second = await createTask(lister, { title: 'second', status: 'completed' })
  const third = await createTask(lister, { title: 'third', status: 'in-progress' })
  // Noise from another user that must never show up.
  const foreign = await createTask(other, { title: 'not yours' })

  const list = (user: TestUser, query = '') => app.inject({ method: 'GET', url: `/tasks${query}`, headers: user.auth })
  // The caller's tasks by status, whatever the filter and page (one of each).
  const COUNTS = { todo: 1, inProgress: 1, completed: 1 }

  t.test('only the caller\'s tasks, newest first, with X-Total-Count', async (t) => {
    const res = await list(lister)
    t.equal(res.statusCode, 200)
    t.equal(String(res.headers['x-total-count']), '3')
    const body = json(res)
    t.same(Object.keys(body).sort(), ['completed', 'data', 'inProgress', 'success', 'todo', 'total'])
    t.equal(body.success, true)
    t.same(body.data, [third, second, first])
    t.match(body, { total: 3, ...COUNTS }, 'the counts beside the page, total = X-Total-Count')
    t.notOk(body.data.some((task: { id: number }) => task.id === foreign.id))
  })

  t.test('a user without tasks gets an empty array and counts of 0', async (t) => {
    const empty = await registerUser(app)
    const res = await list(empty)
    t.equal(res.statusCode, 200)
    t.same(json(res), { success: true, data: [], total: 0, todo: 0, inProgress: 0, completed: 0 })
    t.equal(String(res.headers['x-total-count']), '0')
    const filtered = await list(empty, '?status=completed')
    t.same(json(filtered), { success: true, data: [], total: 0, todo: 0, inProgress: 0, completed: 0 })
  })

  t.test('ordered by created_at desc, then id desc', async (t) => {
    // first becomes the newest; second and third share a created_at, so id decides.
    await app.db.updateTable('tasks').set({ created_at: new Date('2030-01-01T00:00:00.000Z') }).where('id', '=', first.id).execute()
    await app.db.updateTable('tasks').set({ created_at: new Date('2025-01-01T00:00:00.000Z') }).where('id', 'in', [second.id, third.id]).execute()
    t.teardown(async () => {
      for (const task of [first, second, third]) {
        await app.db.updateTable('tasks').set({ created_at: new Date(task.createdAt) }).where('id', '=', task.id).execute()
      }
    })
    const res = await list(lister)
    t.equal(res.statusCode, 200)
    t.same(json(res).data.map((task: { id: number }) => task.id), [first.id, third.id, second.id])
  })

  t.test('status filter; X-Total-Count counts the filtered set', async (t) => {
    const completed = await list(lister, '?status=completed')
    t.equal(completed.statusCode, 200)
    t.same(json(completed), { success: true, data: [second], total: 1, ...COUNTS }, 'total counts the filter, the status counts ignore it')
    t.equal(String(completed.headers['x-total-count']), '1')

    const todo = await list(lister, '?status=todo')
    t.same(json(todo), { success: true, data: [first], total: 1, ...COUNTS })
    t.equal(String(todo.headers['x-total-count']), '1')

    const otherTodo = await list(other, '?status=todo')
    t.notOk(json(otherTodo).data.some((task: { id: number }) => task.id === first.id))
  })

  t.test('limit and offset page through; the total ignores them', async (t) => {
    const page1 = await list(lister, '?limit=2')
    t.equal(page1.statusCode, 200)
    t.same(json(page1).data, [third, second])
    t.equal(String(page1.headers['x-total-count']), '3')

    const page2 = await list(lister, '?limit=2&offset=2')
    t.same(json(page2).data, [first])
    t.equal(String(page2.headers['x-total-count']), '3')

    const past = await list(lister, '?offset=10')
    t.equal(past.statusCode, 200)
    t.same(json(past), { success: true, data: [], total: 3, ...COUNTS })
    t.equal(String(past.headers['x-total-count']), '3')

    const filteredPage = await list(lister, '?status=in-progress&limit=1&offset=0')
    t.same(json(filteredPage).data, [third])
    t.equal(String(filteredPage.headers['x-total-count']), '1')

    const filteredPast = await list(lister, '?status=in-progress&offset=1')
    t.same(json(filteredPast), { success: true, data: [], total: 1, ...COUNTS })
    t.equal(String(filteredPast.headers['x-total-count']), '1', 'a filtered page past the end still counts the filter')
  })

  t.test('limit defaults to 1,000 and accepts up to 1,000', async (t) => {
    const pager = await registerUser(app)
    await app.db.insertInto('tasks')
      .values(Array.from({ length: 1001 }, (_, i) => ({ user_id: pager.id, title: `bulk ${i}`, status: i % 10 === 0 ? 'completed' as const : 'todo' as const, updated_at: new Date() })))
      .execute()
    const byDefault = await list(pager)
    t.equal(byDefault.statusCode, 200)
    t.equal(json(byDefault).data.length, 1000)
    t.equal(String(byDefault.headers['x-total-count']), '1001')
    t.match(json(byDefault), { total: 1001, todo: 900, inProgress: 0, completed: 101 })

    const small = await list(pager, '?limit=100')
    t.equal(small.statusCode, 200)
    t.equal(json(small).data.length, 100)

    const max = await list(pager, '?limit=1000&offset=1')
    t.equal(max.statusCode, 200)
    t.equal(json(max).data.length, 1000)

    const rest = await list(pager, '?offset=1000')
    t.equal(json(rest).data.length, 1)
  })

  // The page is joined from the answers PostgreSQL stores beside each task (db/tasks.ts),
  // every other task answer is JavaScript's: the same tasks must come out the same, to the byte,
  // also after a write that went around the API.
  t.test('the page is each task as GET /tasks/:id answers it, in JSON.stringify\'s form', async (t) => {
    const writer = await registerUser(app)
    const titles = ['quote " backslash \\ slash /', 'tab\tnew line\nreturn\r\b\f \u0001\u001f\u007f', 'é € 𝄞 \u2028\u2029 \uFEFF', '<script>&amp;</script>']
    const created: Array<Record<string, any>> = []
    for (const [i, title] of titles.entries()) {
      created.push(await createTask(writer, {
        title,
        description: i === 0 ? null : `${title}\n${'x'.repeat(i * 100)}`,
        status: (['todo', 'in-progress', 'completed', 'todo'] as const)[i],
        dueDate: [null, '0001-01-01T00:00:00Z', '9999-12-31T23:59:59.999999Z', '2028-02-29T12:00:00.5-05:30'][i]
      }))
    }
    // Microseconds, which both forms truncate to milliseconds.
    await app.db.updateTable('tasks').set({ updated_at: sql<string>`'2026-03-04 05:06:07.891999+00'` }).where('id', '=', created[1]!.id).execute()
    const res = await list(writer)
    t.equal(res.statusCode, 200)
    t.match(res.headers['content-type'], /^application\/json; charset=utf-8$/)
    t.equal(res.body, JSON.stringify(json(res)), 'compact, keys and escapes as JSON.stringify writes them')
    const one = await Promise.all(created.map(async (task) =>
      json(await app.inject({ method: 'GET', url: `/tasks/${task.id}`, headers: writer.auth })).data))
    t.same(json(res).data, one.reverse())
    t.equal(json(res).data.find((task: { id: number }) => task.id === created[1]!.id).updatedAt, '2026-03-04T05:06:07.891Z')
    for (const task of json(res).data) t.same(Object.keys(task), Object.keys(one[0]!), 'the keys in the schema\'s order')
  })

  // The stored answer is computed in the session that writes the row: whatever that session's
  // time zone and date style, the answer's timestamps are the API's UTC form.
  t.test("a task written from a session in another time zone and date style: the page's form", async (t) => {
    const writer = await registerUser(app)
    const task = await createTask(writer, { title: 'zoned' })
    await app.db.transaction().execute(async (trx) => {
      await sql`set local timezone = 'Asia/Kolkata'`.execute(trx)
      await sql`set local datestyle = 'SQL, DMY'`.execute(trx)
      await sql`update tasks set due_date = '2027-01-02 03:04:05.678+05:30', title = 'zoned, moved' where id = ${task.id}`.execute(trx)
    })
    const page = json(await list(writer)).data
    const one = json(await app.inject({ method: 'GET', url: `/tasks/${task.id}`, headers: writer.auth })).data
    t.same(page, [one])
    t.match(page[0], { title: 'zoned, moved', dueDate: '2027-01-01T21:34:05.678Z' })
  })

  t.test('invalid query: 400 Validation failed', async (t) => {
    const cases: Array<[string, string]> = [
      ['?limit=0', 'limit'],
      ['?limit=1001', 'limit'],
      ['?limit=-1', 'limit'],
      ['?limit=abc', 'limit'],
      ['?limit=1.5', 'limit'],
      ['?limit=1&limit=2', 'limit'],
      ['?limit=0x10', 'limit'],
      ['?limit=1e400', 'limit'],
      ['?limit=Infinity', 'limit'],
      ['?offset=1e400', 'offset'],
      ['?offset=-Infinity', 'offset'],
      ['?offset=%201', 'offset'],
      ['?offset=-1', 'offset'],
      ['?offset=abc', 'offset'],
      ['?status=done', 'status'],
      ['?sort=title', 'sort'],
      ['?userId=' + lister.id, 'userId']
    ]
    for (const [query, field] of cases) {
      await t.test(query, async (t) => {
        const res = await list(other, query)
        assertValidationFailed(t, res, field)
      })
    }
    const unknown = await list(lister, '?foo=1')
    t.same(json(unknown), { success: false, error: 'Validation failed', code: 'VALIDATION_FAILED', details: ['Unknown field - foo'] })
  })
})

t.test('GET /tasks/:id', async (t) => {
  const task = await createTask(owner, { title: 'Fetch me', description: 'details', dueDate: '2027-03-04T05:06:07.000Z' })

  t.test('200 with the caller\'s task', async (t) => {
    const res = await app.inject({ method: 'GET', url: `/tasks/${task.id}`, headers: owner.auth })
    t.equal(res.statusCode, 200)
    t.same(json(res), { success: true, data: task })
  })

  t.test('unknown id: 404 Task not found', async (t) => {
    for (const id of [task.id + 100_000, 2147483647]) {
      const res = await app.inject({ method: 'GET', url: `/tasks/${id}`, headers: owner.auth })
      t.equal(res.statusCode, 404, `id ${id}`)
      t.same(json(res), NOT_FOUND)
    }
  })

  t.test('id not an integer in 1..2^31-1: 400 Validation failed', async (t) => {
    // Only canonical decimal integers: no hex, exponents, padding, fractions or infinities.
    for (const id of ['abc', '0', '-1', '1.5', '2147483648', '99999999999999999999', '0x5', '5e0', '%205', '5.0', '05', '+5', '1e400', 'Infinity', '-Infinity']) {
      await t.test(id, async (t) => {
        const res = await app.inject({ method: 'GET', url: `/tasks/${id}`, headers: owner.auth })
        assertValidationFailed(t, res, 'id')
      })
    }
  })
})

t.test('PATCH /tasks/:id', async (t) => {
  const patch = (id: number, payload: unknown, user: TestUser = owner) =>
    app.inject({ method: 'PATCH', url: `/tasks/${id}`, headers: user.auth, payload: payload as Record<string, unknown> })

  t.test('partial update changes only the given fields', async (t) => {
    const task = await createTask(owner, { title: 'Original', description: 'keep me', status: 'in-progress', dueDate: '2027-01-01T00:00:00.000Z' })
    const res = await patch(task.id, { description: 'changed' })
    t.equal(res.statusCode, 200)
    const body = json(res)
    t.same(Object.keys(body).sort(), ['data', 'success'])
    t.same(Object.keys(body.data).sort(), TASK_KEYS)
    t.same(body.data, { ...task, description: 'changed', updatedAt: body.data.updatedAt })
    t.match(await taskRow(task.id), { title: 'Original', description: 'changed', status: 'in-progress' })

    const cleared = await patch(task.id, { description: null, dueDate: null, title: '  Renamed  ' })
    t.equal(cleared.statusCode, 200)
    t.match(json(cleared).data, { title: 'Renamed', description: null, dueDate: null, status: 'in-progress' })
    t.match(await taskRow(task.id), { title: 'Renamed', description: null, due_date: null })

    const due = await patch(task.id, { dueDate: '2028-02-29T12:00:00-05:00' })
    t.equal(json(due).data.dueDate, '2028-02-29T17:00:00.000Z')
  })

  t.test('updatedAt is bumped on a change', async (t) => {
    const task = await createTask(owner, { title: 'Bump' })
    await app.db.updateTable('tasks').set({ updated_at: LONG_AGO }).where('id', '=', task.id).execute()
    const res = await patch(task.id, { title: 'Bumped' })
    t.equal(res.statusCode, 200)
    const updated = json(res).data
    t.match(updated.updatedAt, ISO)
    t.ok(Date.parse(updated.updatedAt) > Date.parse(LONG_AGO), `updatedAt ${updated.updatedAt} moved forward`)
    t.ok(Date.parse(updated.updatedAt) >= Date.parse(task.updatedAt), 'not earlier than before')
    t.equal(updated.createdAt, task.createdAt, 'createdAt never changes')
    t.equal((await taskRow(task.id))?.updated_at, updated.updatedAt)
  })

  t.test('status transitions drive completedAt', async (t) => {
    const task = await createTask(owner, { title: 'Lifecycle' })

    const done = await patch(task.id, { status: 'completed' })
    t.equal(done.statusCode, 200)
    t.equal(json(done).data.status, 'completed')
    t.match(json(done).data.completedAt, ISO)
    t.equal((await taskRow(task.id))?.completed_at, json(done).data.completedAt)

    // Move the stored completion into the past, so "kept" is distinguishable from "reset to now".
    await app.db.updateTable('tasks').set({ completed_at: LONG_AGO }).where('id', '=', task.id).execute()
    const again = await patch(task.id, { status: 'completed' })
    t.equal(again.statusCode, 200)
    t.match(json(again).data, { status: 'completed', completedAt: LONG_AGO })

    const titleOnly = await patch(task.id, { title: 'Lifecycle renamed' })
    t.equal(titleOnly.statusCode, 200)
    t.match(json(titleOnly).data, { title: 'Lifecycle renamed', status: 'completed', completedAt: LONG_AGO })
    t.equal((await taskRow(task.id))?.completed_at, LONG_AGO)

    const reopened = await patch(task.id, { status: 'todo' })
    t.equal(reopened.statusCode, 200)
    t.match(json(reopened).data, { status: 'todo', completedAt: null })
    t.equal((await taskRow(task.id))?.completed_at, null)

    const redone = await patch(task.id, { status: 'completed' })
    t.match(json(redone).data.completedAt, ISO)
    t.not(json(redone).data.completedAt, LONG_AGO, 'a new completion gets a new time')

    const inProgress = await patch(task.id, { status: 'in-progress' })
    t.match(json(inProgress).data, { status: 'in-progress', completedAt: null })

    const todoAgain = await patch(task.id, { status: 'todo' })
    t.match(json(todoAgain).data, { status: 'todo', completedAt: null })
  })

  t.test('a title-only patch on an open task leaves status and completedAt alone', async (t) => {
    const task = await createTask(owner, { title: 'Open', status: 'in-progress' })
    const res = await patch(task.id, { title: 'Still open' })
    t.match(json(res).data, { title: 'Still open', status: 'in-progress', completedAt: null })
  })

  t.test('refused patches: 400 and the row is unchanged', async (t) => {
    const task = await createTask(owner, { title: 'Guarded', description: 'original' })
    const before = await taskRow(task.id)

    const empty = await patch(task.id, {})
    t.equal(empty.statusCode, 400)
    t.match(json(empty), { success: false, error: 'Validation failed', code: 'VALIDATION_FAILED', details: Array })
    t.ok(json(empty).details.length >= 1)

    const blank = await patch(task.id, { title: '  ' })
    t.equal(blank.statusCode, 400)
    t.same(json(blank), { success: false, error: 'Validation failed', code: 'VALIDATION_FAILED', details: ['Title is required - title'] })

    const nullTitle = await patch(task.id, { title: null })
    assertValidationFailed(t, nullTitle, 'title')

    assertValidationFailed(t, await patch(task.id, { title: 'x'.repeat(256) }), 'title')
    assertValidationFailed(t, await patch(task.id, { description: 'x'.repeat(10_001) }), 'description')
    assertValidationFailed(t, await patch(task.id, { status: 'done' }), 'status')
    assertValidationFailed(t, await patch(task.id, { dueDate: 'soon' }), 'dueDate')

    const foreignField = await patch(task.id, { userId: other.id })
    t.same(json(foreignField), { success: false, error: 'Validation failed', code: 'VALIDATION_FAILED', details: ['Unknown field - userId'] })
    const completedAt = await patch(task.id, { completedAt: LONG_AGO })
    t.same(json(completedAt), { success: false, error: 'Validation failed', code: 'VALIDATION_FAILED', details: ['Is set by the server when the status becomes completed; send null or leave it out - completedAt'] })

    t.same(await taskRow(task.id), before)
  })

  t.test('unknown id: 404; bad id: 400', async (t) => {
    const missing = await patch(2147483647, { title: 'x' })
    t.equal(missing.statusCode, 404)
    t.same(json(missing), NOT_FOUND)
    const bad = await app.inject({ method: 'PATCH', url: '/tasks/abc', headers: owner.auth, payload: { title: 'x' } })
    assertValidationFailed(t, bad, 'id')
  })
})

t.test('PUT /tasks/:id', async (t) => {
  const put = (id: number, payload: Record<string, unknown>) =>
    app.inject({ method: 'PUT', url: `/tasks/${id}`, headers: owner.auth, payload })

  t.test('full replacement: omitted fields become null / todo', async (t) => {
    const task = await createTask(owner, { title: 'Full', description: 'will vanish', status: 'completed', dueDate: '2027-05-05T00:00:00.000Z' })
    const res = await put(task.id, { title: '  Replaced  ' })
    t.equal(res.statusCode, 200)
    const body = json(res)
    t.same(Object.keys(body).sort(), ['data', 'success'])
    t.same(body.data, {
      ...task,
      title: 'Replaced',
      description: null,
      status: 'todo',
      dueDate: null,
      completedAt: null,
      updatedAt: body.data.updatedAt
    })
    t.match(await taskRow(task.id), { title: 'Replaced', description: null, status: 'todo', due_date: null, completed_at: null })

    await put(task.id, { title: 'Replaced', description: 'back again', dueDate: '2027-05-05T00:00:00.000Z' })
    const explicitNull = await put(task.id, { title: 'Replaced', description: null, dueDate: null })
    t.match(json(explicitNull).data, { description: null, dueDate: null })
    t.match(await taskRow(task.id), { description: null, due_date: null })
  })

  t.test('all fields given are stored; completing sets completedAt, staying completed keeps it', async (t) => {
    const task = await createTask(owner, { title: 'To replace' })
    const res = await put(task.id, { title: 'New', description: 'desc', status: 'completed', dueDate: '2027-06-06T06:06:06Z' })
    t.equal(res.statusCode, 200)
    t.match(json(res).data, { id: task.id, title: 'New', description: 'desc', status: 'completed', dueDate: '2027-06-06T06:06:06.000Z', completedAt: ISO })

    await app.db.updateTable('tasks').set({ completed_at: LONG_AGO }).where('id', '=', task.id).execute()
    const stays = await put(task.id, { title: 'New again', status: 'completed' })
    t.match(json(stays).data, { title: 'New again', status: 'completed', completedAt: LONG_AGO, description: null, dueDate: null })
  })

  t.test('refused replacements: 400 and the row is unchanged', async (t) => {
    const task = await createTask(owner, { title: 'Keep', description: 'kept' })
    const before = await taskRow(task.id)

    const noTitle = await put(task.id, { description: 'no title' })
    t.equal(noTitle.statusCode, 400)
    t.same(json(noTitle), { success: false, error: 'Validation failed', code: 'VALIDATION_FAILED', details: ['Title is required - title'] })

    const blank = await put(task.id, { title: ' ' })
    t.same(json(blank), { success: false, error: 'Validation failed', code: 'VALIDATION_FAILED', details: ['Title is required - title'] })

    assertValidationFailed(t, await put(task.id, { title: 'ok', status: 'done' }), 'status')
    const unknown = await put(task.id, { title: 'ok', userId: other.id })
    t.same(json(unknown), { success: false, error: 'Validation failed', code: 'VALIDATION_FAILED', details: ['Unknown field - userId'] })

    t.same(await taskRow(task.id), before)
  })

  t.test('unknown id: 404', async (t) => {
    const res = await put(2147483647, { title: 'x' })
    t.equal(res.statusCode, 404)
    t.same(json(res), NOT_FOUND)
  })
})

t.test('DELETE /tasks/:id', async (t) => {
  const task = await createTask(owner, { title: 'Short-lived' })

  const res = await app.inject({ method: 'DELETE', url: `/tasks/${task.id}`, headers: owner.auth })
  t.equal(res.statusCode, 200)
  t.same(json(res), { success: true, data: { id: task.id, deleted: true } })
  t.equal(await taskRow(task.id), undefined, 'row is gone')

  const fetched = await app.inject({ method: 'GET', url: `/tasks/${task.id}`, headers: owner.auth })
  t.equal(fetched.statusCode, 404)
  t.same(json(fetched), NOT_FOUND)

  const again = await app.inject({ method: 'DELETE', url: `/tasks/${task.id}`, headers: owner.auth })
  t.equal(again.statusCode, 404)
  t.same(json(again), NOT_FOUND)

  const bad = await app.inject({ method: 'DELETE', url: '/tasks/0', headers: owner.auth })
  assertValidationFailed(t, bad, 'id')
})

t.test('another user\'s task is indistinguishable from a missing one', async (t) => {
  const mine = await createTask(owner, { title: 'Private', description: 'secret', status: 'completed', dueDate: '2027-07-07T07:07:07.000Z' })
  const before = await taskRow(mine.id)
  const missingId = 2147483646

  const attempts: Array<{ method: 'GET' | 'PATCH' | 'PUT' | 'DELETE', payload?: Record<string, unknown> }> = [
    { method: 'GET' },
    { method: 'PATCH', payload: { title: 'hijacked', status: 'todo' } },
    { method: 'PUT', payload: { title: 'hijacked' } },
    { method: 'DELETE' }
  ]
  for (const { method, payload } of attempts) {
    await t.test(method, async (t) => {
      const foreign = await app.inject({ method, url: `/tasks/${mine.id}`, headers: other.auth, payload })
      const missing = await app.inject({ method, url: `/tasks/${missingId}`, headers: other.auth, payload })
      t.equal(foreign.statusCode, 404)
      t.equal(missing.statusCode, 404)
      t.same(json(foreign), NOT_FOUND)
      t.equal(foreign.body, missing.body, 'byte-identical to the body for a nonexistent id')
      t.equal(foreign.headers['content-type'], missing.headers['content-type'])
      t.same(await taskRow(mine.id), before, 'the owner\'s row is untouched')
    })
  }

  t.test('the other user\'s list never contains it', async (t) => {
    for (const query of ['', '?status=completed', '?limit=100']) {
      const res = await app.inject({ method: 'GET', url: `/tasks${query}`, headers: other.auth })
      t.equal(res.statusCode, 200)
      const ids = json(res).data.map((task: { id: number }) => task.id)
      t.notOk(ids.includes(mine.id), `not in /tasks${query}`)
      t.equal(String(res.headers['x-total-count']), String(await countOwnTasks(other.id, query.includes('completed') ? 'completed' : undefined)))
    }
  })

  t.test('the owner still sees it intact', async (t) => {
    const res = await app.inject({ method: 'GET', url: `/tasks/${mine.id}`, headers: owner.auth })
    t.same(json(res), { success: true, data: mine })
  })
})

t.test('no valid token: 401 on every tasks route, nothing changes', async (t) => {
  const task = await createTask(owner, { title: 'Behind auth' })
  const before = await taskRow(task.id)
  const tasksBefore = await countRows('tasks', owner.id)

  const routes: Array<{ method: 'GET' | 'POST' | 'PATCH' | 'PUT' | 'DELETE', url: string, payload?: Record<string, unknown> }> = [
    { method: 'GET', url: '/tasks' },
    { method: 'POST', url: '/tasks', payload: { title: 'sneaky' } },
    { method: 'POST', url: '/tasks', payload: {} },
    { method: 'GET', url: `/tasks/${task.id}` },
    { method: 'PATCH', url: `/tasks/${task.id}`, payload: { title: 'sneaky' } },
    { method: 'PUT', url: `/tasks/${task.id}`, payload: { title: 'sneaky' } },
    { method: 'DELETE', url: `/tasks/${task.id}` },
    { method: 'GET', url: '/tasks/abc' }
  ]
  const credentials: Array<[string, Record<string, string>]> = [
    ['no token', {}],
    ['garbage bearer token', { authorization: 'Bearer not-a-jwt' }],
    ['token in the wrong scheme', { authorization: `Basic ${owner.token}` }]
  ]
  for (const [label, headers] of credentials) {
    for (const { method, url, payload } of routes) {
      await t.test(`${label}: ${method} ${url}`, async (t) => {
        const res = await app.inject({ method, url, headers, payload })
        t.equal(res.statusCode, 401)
        t.same(json(res), { success: false, error: 'Unauthorized', code: 'UNAUTHORIZED' })
      })
    }
  }
  t.same(await taskRow(task.id), before, 'task untouched')
  t.equal(await countRows('tasks', owner.id), tasksBefore, 'nothing created')
})
