// --profile: instead of the benchmark, one scenario (or ceiling) under node --cpu-prof, and
// where each thread's CPU went during the measured window (profile.ts summarizes).
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { Bench } from './context.js'
import type { LoadResult } from './load.js'
import { describe, log, step } from './log.js'
import { ROOT } from './paths.js'
import { formatProfile, summarizeProfile } from './profile.js'
import { runOptionsFor } from './requests.js'
import type { CeilingKind, ScenarioName, Window } from './types.js'

/** `target`: a scenario name, or ceiling.<kind> (options.ts checks it is one of PROFILE_TARGETS). */
export async function runProfile ({ options, service, runs, requests, ceilings }: Bench, target: string): Promise<void> {
  step(`profiling ${target} with node --cpu-prof`)
  const profDir = mkdtempSync(path.join(os.tmpdir(), 'bench-cpuprof-'))
  let run: { result: LoadResult, window: Window, spawnedAt: number }
  let root = service.root
  if (target.startsWith('ceiling.')) {
    if (options.db === 'pglite') await service.stop()
    run = await ceilings.run(target.slice('ceiling.'.length) as CeilingKind, ['--cpu-prof', '--cpu-prof-dir', profDir])
    root = ROOT
  } else {
    const name = target as ScenarioName
    await service.stop()
    const spawnedAt = Date.now()
    await service.start(['--cpu-prof', '--cpu-prof-dir', profDir])
    if (name === 'webhook') requests.prepareWebhooks(options.duration + options.warmup)
    const m = await runs.measure(name, requests.for(name), runOptionsFor(name))
    describe(name, m)
    run = { result: m.result, window: m.window, spawnedAt }
    await service.waitIdle()
    await service.stop()
  }
  // One profile per thread: CPU.<date>.<time>.<pid>.<thread id>.<n>.cpuprofile, thread 0 the
  // main one. Worker threads (the embedded database's, the hashing pool's) start later: their
  // window is shifted by the difference of the profiles' start times (one clock per process).
  const files = readdirSync(profDir).filter((f) => f.endsWith('.cpuprofile'))
    .map((f) => ({ file: path.join(profDir, f), thread: Number(f.split('.')[4]) }))
    .sort((a, b) => a.thread - b.thread)
  if (files[0]?.thread !== 0) throw new Error('no .cpuprofile of the main thread written')
  const startOf = (file: string) => (JSON.parse(readFileSync(file, 'utf8')) as { startTime: number }).startTime / 1000
  const mainStart = startOf(files[0].file)
  for (const { file, thread } of files) {
    const shift = startOf(file) - mainStart
    const summary = summarizeProfile(file, root, { from: run.window.from - run.spawnedAt - shift, to: run.window.to - run.spawnedAt - shift })
    if (summary.busyMs === 0) continue
    log(`\n== ${thread === 0 ? 'main thread' : `worker thread ${thread}`}`)
    log(formatProfile(summary, run.result.responses))
    log(`profile: ${file} (open it in Chrome DevTools → Performance, or speedscope)`)
  }
}
