// Turns per user (plugins/app/user-turns.ts): a route declaring `answersPerUser` builds that
// many answers at once for one user; the user's further requests wait their turn, at most
// WAITING_PER_USER of them, and past that are refused with 429. A route of the test's own,
// whose answers wait on a gate the test opens, holds a turn as long as the test wants; GET
// /tasks, which declares one answer per user, is checked end to end beside it.
import Fastify, { type FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import t from 'tap'
import { Type } from 'typebox'
import serviceApp from '../../app.js'
import { serverOptions } from '../../server-options.js'
import { WAITING_PER_USER } from '../../plugins/app/user-turns.js'
import { json, registerUser, testConfig, until, type TestUser } from '../support/helper.js'

interface Gated {
  app: FastifyInstance
  /** Answers being built now, per user id. */
  running: Map<string, number>
  /** The most answers built at once for one user. */
  most: Map<string, number>
  started: () => number
  open: () => void
}

async function gatedApp (t: { teardown: (fn: () => unknown) => void }): Promise<Gated> {
  // Every client here is on 127.0.0.1: a full line is more connections than one address's share.
  const config = await testConfig(t, { MAX_CONNECTIONS_PER_ADDRESS: '1000' })
  const app = Fastify(serverOptions(config))
  app.register(fp(serviceApp), { config })
  const running = new Map<string, number>()
  const most = new Map<string, number>()
  let started = 0
  let open!: () => void
  const gate = new Promise<void>((resolve) => { open = resolve })
  app.register(async (instance) => {
    instance.get('/test/gated', {
      config: { answersPerUser: 1 },
      schema: { response: { 200: Type.Object({ success: Type.Literal(true) }) } }
    }, async (request) => {
      const user = String(request.user.id)
      started++
      running.set(user, (running.get(user) ?? 0) + 1)
      most.set(user, Math.max(most.get(user) ?? 0, running.get(user)!))
      await gate
      running.set(user, running.get(user)! - 1)
      return { success: true as const }
    })
  })
  t.teardown(() => app.close())
  await app.ready()
  return { app, running, most, started: () => started, open }
}

/** Fires the requests at once; with the gate shut only refusals can settle: waits for `refusals` of them. */
async function fire<T extends { status: number }> (requests: Array<Promise<T>>, refusals: number) {
  const settled: Array<T | undefined> = requests.map(() => undefined)
  requests.forEach((r, i) => { r.then((res) => { settled[i] = res }, () => {}) })
  await until(() => settled.filter((s) => s !== undefined).length >= refusals, `${refusals} refused`)
  return { settled, pending: requests.filter((_, i) => settled[i] === undefined) }
}

t.test('one user\'s answers are built one at a time: the next wait their turn, past the line a 429; other users are not held', async (t) => {
  const { app, most, started, open } = await gatedApp(t)
  const alice = await registerUser(app)
  const bob = await registerUser(app)
  const get = async (user: TestUser) => {
    const res = await app.inject({ method: 'GET', url: '/test/gated', headers: user.auth })
    return Object.assign(res, { status: res.statusCode })
  }

  const first = get(alice)
  await until(() => started() === 1, 'the first answer is being built')
  // One running, WAITING_PER_USER waiting: of WAITING_PER_USER + 3 more, 3 are refused at once.
  const { settled, pending } = await fire(Array.from({ length: WAITING_PER_USER + 3 }, () => get(alice)), 3)
  const refused = settled.filter((s) => s !== undefined)
  t.same(refused.map((r) => r.status), [429, 429, 429], `past ${WAITING_PER_USER} waiting, refused at once`)
  t.equal(refused[0]!.headers['retry-after'], '1')
  t.same(json(refused[0]!), { success: false, error: 'Too many requests', code: 'RATE_LIMITED' })
  t.equal(pending.length, WAITING_PER_USER)
  t.equal(started(), 1, 'the waiting requests have not started')

  const other = get(bob)
  await until(() => started() === 2, 'another user\'s request is built beside them')

  open()
  const answers = await Promise.all([first, ...pending, other])
  t.same(answers.map((a) => a.statusCode), answers.map(() => 200), 'every one that waited is answered')
  t.equal(most.get(String(alice.id)), 1, 'never two of the user\'s answers at once')
  t.equal(started(), WAITING_PER_USER + 2)

  // Once the line is empty, the user's next request starts at once.
  t.equal((await get(alice)).statusCode, 200)
})

t.test('a request whose client goes leaves the line; one that goes while its answer is built gives its turn back', async (t) => {
  const { app, started, open } = await gatedApp(t)
  const alice = await registerUser(app)
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as { port: number }
  const url = `http://127.0.0.1:${port}/test/gated`
  const controllers = new Map<Promise<Response>, AbortController>()
  const send = () => {
    const controller = new AbortController()
    const res = fetch(url, { headers: alice.auth, signal: controller.signal })
    controllers.set(res, controller)
    return res
  }
  const gone = (res: Promise<Response>) => res.then(() => 'answered', (err: Error) => err.name)

  const running = send()
  await until(() => started() === 1, 'the first answer is being built')
  const full = await fire(Array.from({ length: WAITING_PER_USER + 1 }, send), 1)
  t.same(full.settled.filter((s) => s !== undefined).map((r) => r.status), [429], 'the line is full')

  // One waiting request goes: its place is free, so of two more, one waits and one is refused.
  const leaving = full.pending.pop()!
  controllers.get(leaving)!.abort()
  t.equal(await gone(leaving), 'AbortError')
  const two = await fire([send(), send()], 1)
  t.same(two.settled.filter((s) => s !== undefined).map((r) => r.status), [429], 'one of two refused')

  // The running request goes: the next in line starts.
  controllers.get(running)!.abort()
  t.equal(await gone(running), 'AbortError')
  await until(() => started() === 2, 'the next in line starts once the running one is gone')

  open()
  const statuses = await Promise.all([...full.pending, ...two.pending].map(async (r) => (await r).status))
  t.same(statuses, statuses.map(() => 200), 'the rest of the line is answered')
  t.equal(statuses.length, WAITING_PER_USER, 'the place the leaver freed was taken')
  t.equal(started(), 1 + WAITING_PER_USER, 'the request that left the line was never built')
})

t.test('GET /tasks: a light user\'s concurrent pages are all answered, each whole; another user\'s page meanwhile', async (t) => {
  const { app } = await gatedApp(t)
  const alice = await registerUser(app)
  const bob = await registerUser(app)
  for (let i = 0; i < 5; i++) {
    await app.inject({ method: 'POST', url: '/tasks', headers: alice.auth, payload: { title: `task ${i}` } })
  }
  const pages = await Promise.all([
    ...Array.from({ length: WAITING_PER_USER + 1 }, () => app.inject({ method: 'GET', url: '/tasks', headers: alice.auth })),
    app.inject({ method: 'GET', url: '/tasks', headers: bob.auth })
  ])
  const bobs = pages.pop()!
  t.equal(bobs.statusCode, 200)
  t.equal(json(bobs).total, 0)
  // Light pages (5 tasks) take no turns (linedAfterBytes): more requests than a line holds are all answered.
  for (const page of pages) {
    t.equal(page.statusCode, 200)
    t.equal(json(page).total, 5)
    t.equal(json(page).data.length, 5)
  }
})

t.test('linedAfterBytes: a user takes turns only after an answer past that size; light users go straight through', async (t) => {
  const config = await testConfig(t, { MAX_CONNECTIONS_PER_ADDRESS: '1000' })
  const app = Fastify(serverOptions(config))
  app.register(fp(serviceApp), { config })
  let running = 0
  let most = 0
  let gate = { wait: Promise.resolve(), open: () => {} }
  const shut = () => { let open!: () => void; gate = { wait: new Promise<void>((resolve) => { open = resolve }), open } }
  app.register(async (instance) => {
    instance.get('/test/sized', {
      config: { answersPerUser: 1, linedAfterBytes: 1000 },
      schema: {
        querystring: Type.Object({ bytes: Type.Integer({ minimum: 0, maximum: 10_000 }) }, { additionalProperties: false }),
        response: { 200: Type.Object({ success: Type.Literal(true), filler: Type.String() }) }
      }
    }, async (request) => {
      running++
      most = Math.max(most, running)
      await gate.wait
      running--
      return { success: true as const, filler: 'x'.repeat((request.query as { bytes: number }).bytes) }
    })
  })
  t.teardown(() => app.close())
  await app.ready()
  const alice = await registerUser(app)
  const get = async (bytes: number) => {
    const res = await app.inject({ method: 'GET', url: `/test/sized?bytes=${bytes}`, headers: alice.auth })
    return Object.assign(res, { status: res.statusCode })
  }

  // Light answers: the user's requests are built at once, however many.
  shut()
  const light = Array.from({ length: WAITING_PER_USER + 5 }, () => get(10))
  await until(() => running === WAITING_PER_USER + 5, 'every light request built at once')
  gate.open()
  t.same(new Set((await Promise.all(light)).map((r) => r.statusCode)), new Set([200]), 'none waits or is refused')

  // One answer past the size: from then on the user's answers are built one at a time.
  t.equal((await get(2000)).statusCode, 200)
  most = 0
  shut()
  const lined = Array.from({ length: WAITING_PER_USER + 3 }, () => get(10))
  await until(() => running === 1, 'the first is built')
  const { settled, pending } = await fire(lined, 2)
  t.same(settled.filter((s) => s !== undefined).map((r) => r.statusCode), [429, 429], `one running, ${WAITING_PER_USER} waiting, the rest refused`)
  gate.open()
  const answered = await Promise.all(pending)
  t.equal(answered.length, WAITING_PER_USER + 1)
  t.same(new Set(answered.map((r) => r.statusCode)), new Set([200]))
  t.equal(most, 1, 'never two of the heavy user\'s answers at once')

  // Another user is not lined by alice's heavy answer.
  const bob = await registerUser(app)
  shut()
  const bobs = [0, 1, 2].map(() => app.inject({ method: 'GET', url: '/test/sized?bytes=10', headers: bob.auth }))
  await until(() => running === 3, 'bob\'s three requests built at once')
  gate.open()
  t.same((await Promise.all(bobs)).map((r) => r.statusCode), [200, 200, 200])
})
