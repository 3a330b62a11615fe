// The service's scenarios, in order (requests.ts says what each sends). health and
// tasks.list are measured against their ceilings in interleaved pairs (ceiling, then
// service, --pairs times) and the median pair by ratio is reported: on a shared VM
// identical runs differ by ±20 %, far more than within one pair.
import type { Bench } from './context.js'
import { describe, log, step } from './log.js'
import type { ScenarioRow } from './report.js'
import { runOptionsFor } from './requests.js'
import { medianPair, roundRatio, type Measured } from './runs.js'
import { SCENARIOS, type CeilingKind, type CeilingRun, type ScenarioName } from './types.js'

const PAIRED_WITH: Partial<Record<ScenarioName, CeilingKind[]>> = { health: ['framework', 'framework+headers'], 'tasks.list': ['database'] }

export async function runScenarios ({ options, runs, requests, ceilings, report }: Bench): Promise<void> {
  const { wanted, pairs, duration, warmup } = options
  // The ceilings of a scenario left out by --only are measured alone.
  if (wanted('ceilings')) {
    for (const [name, kinds] of Object.entries(PAIRED_WITH)) {
      if (wanted(name)) continue
      for (const kind of kinds) {
        step(`ceiling: ${kind}`)
        report.recordCeiling(await runs.stable(`ceiling.${kind}`, () => ceilings.runBesideService(kind), (c) => c.others))
      }
    }
  }
  step('the service')
  for (const name of SCENARIOS) {
    if (!wanted(name)) continue
    if (name === 'webhook') requests.prepareWebhooks(duration + warmup)
    const run = () => runs.measure(name, requests.for(name), runOptionsFor(name))
    const kinds = wanted('ceilings') ? PAIRED_WITH[name] : undefined
    let m: Measured
    let ratio: number | null = null
    let ceiling: CeilingKind | null = null
    let extra: Partial<ScenarioRow> = {}
    if (kinds !== undefined) {
      const measured: Array<{ cs: CeilingRun[], s: Measured, ratio: number }> = []
      for (let i = 1; i <= pairs; i++) {
        const pair = await runs.stable(`pair ${i}/${pairs}: ${kinds.join(', ')} + ${name}`, async () => {
          const cs: CeilingRun[] = []
          for (const kind of kinds) cs.push(await ceilings.runBesideService(kind))
          const s = await run()
          describe(name, s)
          return { cs, s, ratio: cs[0]!.result.rps > 0 ? s.result.rps / cs[0]!.result.rps : 0 }
        }, (p) => Math.max(p.s.others ?? 0, ...p.cs.map((c) => c.others ?? 0)))
        measured.push(pair)
      }
      const { median, ratios } = medianPair(measured, name)
      for (const c of median.cs) report.recordCeiling(c)
      m = median.s
      ceiling = kinds[0]!
      ratio = roundRatio(median.ratio)
      extra = { pairRatios: ratios }
      const sameHeaders = median.cs.find((c) => c.kind === 'framework+headers')
      if (sameHeaders !== undefined && sameHeaders.result.rps > 0) {
        extra.ratioToSameHeaders = Math.round(1000 * m.result.rps / sameHeaders.result.rps) / 1000
        extra.cpuUsSameHeaders = sameHeaders.cpuUs
      }
    } else {
      m = await runs.stable(name, async () => { const r = await run(); describe(name, r); return r }, (r) => r.others)
    }
    if (name === 'webhook' && requests.webhooks.signedLate > 0) log(`  (webhook: ${requests.webhooks.signedLate} deliveries signed during the run, the pool ran out)`)
    report.scenarios.push({ name, rps: m.result.rps, p50: m.result.p50, p99: m.result.p99, errors: m.result.errors, cpuUs: m.cpuUs, rssMB: Math.round(m.rssMB), ceiling, ratio, ...extra })
    report.row(name, { ...m.result, cpuUs: m.cpuUs }, m.rssMB, m.eventLoop?.p99 ?? null, ceiling ?? '', ratio, m.others)
    if (extra.ratioToSameHeaders !== undefined) report.row(`${name} vs same headers`, m.result, null, null, 'framework+headers', extra.ratioToSameHeaders)
    report.errors += m.result.errors
  }
}
