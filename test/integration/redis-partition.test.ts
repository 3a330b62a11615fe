// A silent Redis (issue 22 row 4): the proxy in front of it stops passing bytes both ways and
// keeps every socket open, so no error or reset ever arrives. The service, as a process,
// must fail open within about REDIS_COMMAND_TIMEOUT_MS (every request answered, the limits
// letting it through), say so once in its log and in `redis_up`, and come back by itself.
import t from 'tap'
import { randomAddress, testDatabaseEnv, TEST_SECRET, uniqueEmail } from '../support/helper.js'
import { freePort, startServer, waitUntilUp } from './process.js'
import { TcpProxy } from './tcp-proxy.js'

const redisUrl = new URL(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379')
const proxy = TcpProxy.to(redisUrl, 6379)
await proxy.start()
t.teardown(() => proxy.stop())

const METRICS_TOKEN = 'metrics-token-for-the-redis-test'
const server = startServer({
  PORT: String(await freePort()),
  AUTH_JWT_SECRET: TEST_SECRET,
  BCRYPT_ROUNDS: '4',
  REDIS_URL: `redis://127.0.0.1:${proxy.port}`,
  RATE_LIMIT_MAX: '1000',
  AUTH_RATE_LIMIT_MAX: '1000',
  METRICS_TOKEN,
  ...await testDatabaseEnv(t)
})
t.teardown(async () => {
  server.child.kill('SIGTERM')
  await server.exited
})
await waitUntilUp(server)

const call = (path: string, init: RequestInit = {}) => fetch(`${server.base}${path}`, { ...init, headers: { 'content-type': 'application/json', 'x-forwarded-for': randomAddress(), ...init.headers }, signal: AbortSignal.timeout(30_000) })
const registered = await (await call('/auth/register', { method: 'POST', body: JSON.stringify({ email: uniqueEmail('redis'), password: 'correct horse battery' }) })).json() as { token: string, user: { email: string } }
const auth = { authorization: `Bearer ${registered.token}` }
const redisUp = async () => /^redis_up (\d)$/m.exec(await (await call('/metrics', { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })).text())?.[1]
const lines = (pattern: RegExp) => server.output().split('\n').filter((line) => pattern.test(line)).length

async function eventually (condition: () => Promise<boolean>, what: string) {
  for (let i = 0; i < 100; i++) {
    if (await condition()) return
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  t.fail(`timed out waiting for ${what}`)
}

t.test('a silent Redis: every request answered within about the command timeout, logged once, in the metric; then back', async (t) => {
  t.equal((await call('/tasks', { headers: auth })).status, 200, 'served before the partition')
  t.equal(await redisUp(), '1', 'redis_up 1')

  proxy.freeze()
  const answers = []
  for (let i = 0; i < 6; i++) {
    const started = Date.now()
    const [tasks, login] = await Promise.all([
      call('/tasks', { headers: auth }),
      call('/auth/login', { method: 'POST', body: JSON.stringify({ email: registered.user.email, password: 'not the password' }) })
    ])
    answers.push({ statuses: [tasks.status, login.status], ms: Date.now() - started })
  }
  t.same(answers.map((answer) => answer.statuses), Array.from({ length: 6 }, () => [200, 401]), 'served as without limits, not 5xx and not held')
  // The old client waited for TCP to give up (8-20 s seen, minutes in a real partition).
  t.ok(answers.every((answer) => answer.ms < 2000), `each pair within 2 s with REDIS_COMMAND_TIMEOUT_MS at 200 (${answers.map((a) => a.ms).join(', ')} ms)`)
  t.equal(await redisUp(), '0', 'redis_up 0 while it is silent')
  t.equal(lines(/redis unavailable/), 1, 'the outage is one log line, not one per request')

  proxy.thaw()
  await eventually(async () => await redisUp() === '1', 'redis_up to be 1 again')
  t.equal(lines(/redis reachable again/), 1, 'its end is one log line')
  t.equal((await call('/tasks', { headers: auth })).status, 200)
})
