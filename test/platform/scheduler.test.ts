// The scheduler and its periodic jobs, alone: passes counted, no database.
import t from 'tap'
import { PeriodicJob, Scheduler, type Logger, type PassSignals } from '../../jobs/scheduler.js'
import { until } from '../support/helper.js'

const errors: string[] = []
const log: Logger = { debug () {}, info () {}, warn () {}, error (obj, msg) { errors.push(msg) } }

/** A job whose passes are counted, and held open until `release()` when `hold` is set. */
function countingJob (name = 'count', intervalMs = 60_000, stopGraceMs = 50) {
  const state = { passes: 0, running: 0, most: 0, hold: false, fail: false, signals: [] as PassSignals[] }
  let release = () => {}
  const job = new PeriodicJob({
    name,
    intervalMs,
    log,
    stopGraceMs,
    async run (signals) {
      state.passes++
      state.running++
      state.most = Math.max(state.most, state.running)
      state.signals.push(signals)
      try {
        if (state.hold) await new Promise<void>((resolve) => { release = resolve; signals.abort.addEventListener('abort', () => resolve()) })
        if (state.fail) throw new Error('pass failed')
      } finally {
        state.running--
      }
    }
  })
  t.teardown(() => job.stop())
  return { job, state, release: () => release() }
}

t.test('runOnce runs one pass and resolves after it; its error is thrown to the caller', async (t) => {
  const { job, state } = countingJob()
  await job.runOnce()
  t.equal(state.passes, 1)
  state.fail = true
  await t.rejects(job.runOnce(), /pass failed/)
  t.equal(state.passes, 2)
})

t.test('one pass at a time: a wake during a pass brings one more right after it', async (t) => {
  const { job, state, release } = countingJob()
  state.hold = true
  const first = job.runOnce()
  job.wake()
  job.wake()
  job.wake()
  state.hold = false
  release()
  await first
  await until(() => state.passes === 2, 'the pass the wakes asked for')
  await job.runOnce()
  t.equal(state.passes, 3, 'three wakes during a pass: one more pass, not three')
  t.equal(state.most, 1, 'never two passes at once')
})

t.test('start runs a pass at once, then every interval; a failed pass is logged and the job goes on', async (t) => {
  const { job, state } = countingJob('ticking', 20)
  state.fail = true
  job.start()
  await until(() => state.passes >= 3, 'three passes')
  t.ok(errors.includes('ticking failed: trying again at the next interval'))
})

t.test('stop: no pass after it; a pass in progress gets its grace, then its abort signal', async (t) => {
  const { job, state } = countingJob('stopping', 60_000, 50)
  state.hold = true
  const pass = job.runOnce()
  await until(() => state.running === 1, 'the pass runs')
  const started = Date.now()
  await job.stop()
  await pass
  t.ok(state.signals[0]!.stopping.aborted, 'told to begin nothing new')
  t.ok(state.signals[0]!.abort.aborted, 'aborted after the grace period')
  t.ok(Date.now() - started >= 45, 'not before it')
  job.wake()
  job.start()
  await job.runOnce()
  t.equal(state.passes, 1, 'a stopped job runs no more passes')
})

t.test('the scheduler: named jobs, started and stopped together, run one by name', async (t) => {
  const scheduler = new Scheduler(log)
  t.teardown(() => scheduler.stop())
  let purged = 0
  scheduler.every('purge', 60_000, async () => { purged++ })
  const { job, state } = countingJob('other')
  scheduler.add(job)
  t.throws(() => scheduler.every('purge', 1_000, async () => {}), /scheduled already/)
  t.same(scheduler.names, ['purge', 'other'])
  await scheduler.runOnce('purge')
  t.equal(purged, 1)
  await t.rejects(async () => scheduler.runOnce('missing'), /no job named missing/)
  scheduler.start()
  await until(() => purged === 2 && state.passes === 1, 'each ran once at start')
  let late = 0
  scheduler.every('late', 60_000, async () => { late++ })
  await until(() => late === 1, 'a job added to a running scheduler starts at once')
  await scheduler.stop()
  scheduler.job('purge').wake()
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(purged, 2, 'stopped jobs are not woken')
})

t.test('purgeEvery: what a pass removed at info, nothing when it removed nothing, a failure at warn and not as the job\'s error', async (t) => {
  const lines: Array<[string, object, string]> = []
  const recorder: Logger = {
    debug () {},
    info (obj, msg) { lines.push(['info', obj, msg]) },
    warn (obj, msg) { lines.push(['warn', obj, msg]) },
    error (obj, msg) { lines.push(['error', obj, msg]) }
  }
  const scheduler = new Scheduler(recorder)
  t.teardown(() => scheduler.stop())
  let counts: Record<string, number> = { expired: 2, evicted: 0 }
  let fail = false
  const job = scheduler.purgeEvery('purge', 60_000, async () => {
    if (fail) throw new Error('database away')
    return counts
  }, { purged: 'things purged', failed: 'purging things failed' })
  const silent = scheduler.purgeEvery('silent', 60_000, async () => {}, { failed: 'purging the rest failed' })

  await job.runOnce()
  t.same(lines, [['info', { expired: 2, evicted: 0 }, 'things purged']])
  counts = { expired: 0, evicted: 0 }
  await job.runOnce()
  await silent.runOnce()
  t.equal(lines.length, 1, 'a pass that removed nothing, or says nothing, logs nothing')
  fail = true
  await job.runOnce()
  t.equal(lines.length, 2)
  t.match(lines[1], ['warn', { err: { message: 'database away' } }, 'purging things failed: trying again later'])
})
