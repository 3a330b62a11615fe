// Password hashing: bcrypt with BCRYPT_ROUNDS (12, spec §8), in a bounded pool of worker threads
// so sign-ins never stall the event loop. A full queue answers 503 at once instead of
// piling up. Login compares against a dummy hash when the email is unknown, so both
// failures cost the same.
import { randomBytes } from 'node:crypto'
import { availableParallelism } from 'node:os'
import { fileURLToPath } from 'node:url'
import type { Worker } from 'node:worker_threads'
import fp from 'fastify-plugin'
import { Piscina } from 'piscina'
import type { Passwords } from '../../accounts/service.js'
import { waitAtMost } from '../../jobs/scheduler.js'
import { BusyError } from '../../errors.js'
import type { BcryptTask } from './bcrypt.worker.js'

const SHED_WARNING_INTERVAL_MS = 10_000
/** The longest a close waits for a hashing thread still loading its module. */
const THREAD_LOAD_WAIT_MS = 10_000
// piscina's refusals: the queue is full, or (BCRYPT_QUEUE_MAX=0) there is none and every thread is busy.
const QUEUE_FULL = new Set(['Task queue is at limit', 'No task queue available and all Workers are busy'])
// A valid 12-round hash of a random string nobody knows (at another cost, see dummy() below).
const DUMMY_HASH_12 = '$2b$12$zPYEbx98NwUrVW5fAB6Y4ugPGDuDsru5qHhmXFUXVRT8ysrOEvwsS'

declare module 'fastify' {
  interface FastifyInstance {
    passwords: Passwords
  }
}

// The worker file sits beside this one: .ts under tsx, .js once compiled.
const extension = import.meta.url.slice(import.meta.url.lastIndexOf('.'))
const workerFile = fileURLToPath(new URL(`./bcrypt.worker${extension}`, import.meta.url))
// Compiled, the hashing threads run only their own code, as the embedded database's does
// (db/engine/pglite-thread.ts): no preloads of the main thread's. Under tsx they need its preload
// to load the .ts worker.
const workerExecArgv = extension === '.js' ? [] : undefined

export default fp(async function passwords (fastify) {
  // Default: leave one core for serving requests.
  const threads = fastify.config.auth.bcryptWorkers ?? Math.max(1, availableParallelism() - 1)
  const pool = new Piscina<BcryptTask, string | boolean>({
    filename: workerFile,
    minThreads: threads,
    maxThreads: threads,
    maxQueue: fastify.config.auth.bcryptQueueMax,
    execArgv: workerExecArgv,
    idleTimeout: 60_000
  })
  // A thread is never stopped while it loads its module: on Node 20, stopping a thread inside
  // its `require` of an ES module can abort the whole process on a native assertion
  // (module_wrap.cc, CreateRequiredModuleFacade), e.g. when a refused start exits at once
  // (server.ts). A thread's first message says it has loaded (or it has exited); a thread that
  // never says so holds the close for THREAD_LOAD_WAIT_MS at most.
  const loaded = threadsLoaded(pool.threads)
  fastify.addHook('onClose', async () => {
    await waitAtMost(loaded, THREAD_LOAD_WAIT_MS)
    await pool.close()
  })

  // One warning per interval with the count, not one per shed request: an overload is
  // exactly when a line per request would flood the log.
  let shed = 0
  let lastWarning = 0
  const { metrics } = fastify
  const shedTotal = metrics.counter({ name: 'password_hashing_shed_total', help: 'Sign-ins and password changes refused with 503 because the hashing queue was full' })
  const busy = (): Error => {
    shed++
    shedTotal.inc()
    if (Date.now() - lastWarning >= SHED_WARNING_INTERVAL_MS) {
      fastify.log.warn({ shed, queue: pool.queueSize }, 'password hashing queue full: shedding')
      shed = 0
      lastWarning = Date.now()
    }
    return new BusyError()
  }

  // Tasks hashing or waiting: piscina refuses a task beyond one per thread plus the queue.
  const capacity = threads + fastify.config.auth.bcryptQueueMax
  let inPool = 0
  // Read when scraped.
  metrics.gauge({ name: 'password_hashing_queue_depth', help: 'Hashes waiting for a free hashing thread', read: () => pool.queueSize })
  metrics.gauge({ name: 'password_hashing_in_pool', help: 'Hashes running or waiting; at password_hashing_capacity sign-ins are shed', read: () => inPool })
  metrics.gauge({ name: 'password_hashing_capacity', help: 'The most hashes running or waiting (BCRYPT_WORKERS + BCRYPT_QUEUE_MAX)', read: () => capacity })
  // What the pool did, by operation: the work a sign-in costs whoever it is for (an unknown
  // email compares against the dummy), countable from outside (test/accounts/equal-work.test.ts).
  const runsTotal = metrics.counter({ name: 'password_hashing_runs_total', help: 'bcrypt operations handed to the hashing threads, by op (hash, compare)', labelNames: ['op'] as const })
  const run = async <T extends string | boolean>(task: BcryptTask): Promise<T> => {
    runsTotal.inc({ op: task.op })
    inPool++
    try {
      return await pool.run(task) as T
    } catch (err) {
      // A race between admit() and here, or a thread not yet started, still sheds.
      if (QUEUE_FULL.has((err as Error).message)) throw busy()
      throw err
    } finally {
      inPool--
    }
  }

  // The dummy must cost what a real hash costs, or an unknown email answers faster; at
  // another cost than 12 it is made by the first sign-in that needs it.
  const rounds = fastify.config.auth.bcryptRounds
  let dummyHash: Promise<string> | undefined = rounds === 12 ? Promise.resolve(DUMMY_HASH_12) : undefined
  // A failed attempt (shed) is forgotten, so the next sign-in tries again.
  const dummy = () => (dummyHash ??= run<string>({ op: 'hash', password: randomBytes(18).toString('base64'), rounds })
    .catch((err: unknown) => { dummyHash = undefined; throw err }))

  fastify.decorate('passwords', {
    admit () {
      if (inPool >= capacity) throw busy()
    },
    hash: (password: string) => run<string>({ op: 'hash', password, rounds }),
    async verify (password: string, hash: string | undefined) {
      const matches = await run<boolean>({ op: 'compare', password, hash: hash ?? await dummy() })
      return matches && hash !== undefined
    }
  } satisfies Passwords)
}, { name: 'passwords', dependencies: ['metrics'] })

/** Resolves when each of `threads` has sent its first message or exited: listening from the call on. */
export function threadsLoaded (threads: readonly Worker[]): Promise<void> {
  const each = threads.map((thread) => new Promise<void>((resolve) => {
    const settled = () => {
      thread.off('message', settled)
      thread.off('exit', settled)
      resolve()
    }
    thread.on('message', settled)
    thread.on('exit', settled)
  }))
  return Promise.all(each).then(() => undefined)
}
