// The hashing pool never stops a thread that is still loading its module (plugins/app/passwords.ts):
// on Node 20 a thread stopped inside its `require` of an ES module can abort the whole process on
// a native assertion, which a refused start that exited at once met in CI (data-dir.test.ts). The
// app's close waits for each thread's first message, or its exit, within a bound; server.ts closes
// the app before it exits on a failed start.
import { performance } from 'node:perf_hooks'
import { Worker } from 'node:worker_threads'
import t from 'tap'
import { waitAtMost } from '../../jobs/scheduler.js'
import { threadsLoaded } from '../../plugins/app/passwords.js'

/** A thread that says it has loaded after `ms` (never, for null). */
const thread = (ms: number | null) => new Worker(ms === null
  ? 'setInterval(() => {}, 1000)'
  : `setTimeout(() => require('node:worker_threads').parentPort.postMessage('loaded'), ${ms})`, { eval: true })

t.test('resolves once every thread has sent its first message', async (t) => {
  const threads = [thread(20), thread(300)]
  t.teardown(() => Promise.all(threads.map((w) => w.terminate())))
  const spoke: number[] = []
  threads.forEach((w, i) => w.once('message', () => spoke.push(i)))
  await threadsLoaded(threads)
  t.same(spoke.sort(), [0, 1], 'both threads had loaded when it resolved')
})

t.test('a thread that exits without a word counts as settled', async (t) => {
  const exiting = new Worker('process.exit(0)', { eval: true })
  let exited = false
  exiting.once('exit', () => { exited = true })
  await threadsLoaded([exiting])
  t.ok(exited, 'it resolved on the exit')
})

t.test('a thread that never speaks holds the close for the bound only', async (t) => {
  const silent = thread(null)
  t.teardown(() => silent.terminate())
  const started = performance.now()
  await waitAtMost(threadsLoaded([silent]), 200)
  t.ok(performance.now() - started >= 190, 'it waited for the bound')
  t.not(silent.threadId, -1, 'and left the thread running, for the pool to stop')
})
