// What serving metrics costs GET /tasks: the service restarted without and then with
// METRICS_TOKEN (the per-request hook and the default metrics on; a scrape after each run, as
// Prometheus would make), in --pairs interleaved pairs; the median pair by ratio is reported.
// Target: under 5 %.
import { randomBytes } from 'node:crypto'
import type { Bench } from './context.js'
import { describe, step } from './log.js'
import { medianPair, roundRatio, type Measured } from './runs.js'

export async function runMetricsCost ({ options, service, runs, requests, report }: Bench): Promise<void> {
  const { pairs } = options
  const token = randomBytes(24).toString('base64url')
  step(`metrics cost: GET /tasks without and with METRICS_TOKEN, ${pairs} interleaved pair(s), the service restarted for each run`)
  const measured: Array<{ off: Measured, on: Measured, ratio: number }> = []
  try {
    for (let i = 1; i <= pairs; i++) {
      measured.push(await runs.stable(`metrics pair ${i}/${pairs}`, async () => {
        await service.restart({})
        const off = await runs.measure('tasks.list, metrics off', [requests.listTasks()])
        describe('metrics off', off)
        await service.restart({ METRICS_TOKEN: token })
        const on = await runs.measure('tasks.list, metrics on', [requests.listTasks()])
        describe('metrics on', on)
        const scrape = await fetch(`${service.url}/metrics`, { headers: { authorization: `Bearer ${token}` } })
        const text = await scrape.text()
        if (scrape.status !== 200 || !text.includes('route="/tasks",status_code="200"')) throw new Error(`the metrics scrape answered ${scrape.status}`)
        return { off, on, ratio: off.result.rps > 0 ? on.result.rps / off.result.rps : 0 }
      }, (p) => Math.max(p.off.others ?? 0, p.on.others ?? 0)))
    }
  } finally {
    await service.restart({})
  }
  const { median, ratios } = medianPair(measured, 'metrics on/off')
  const ratio = roundRatio(median.ratio)
  report.metricsCost = { offRps: median.off.result.rps, onRps: median.on.result.rps, ratio, pairRatios: ratios }
  report.row('tasks.list, metrics off', { ...median.off.result, cpuUs: median.off.cpuUs }, median.off.rssMB, median.off.eventLoop?.p99 ?? null, '', null, median.off.others)
  report.row('tasks.list, metrics on', { ...median.on.result, cpuUs: median.on.cpuUs }, median.on.rssMB, median.on.eventLoop?.p99 ?? null, 'metrics off', ratio, median.on.others)
  for (const p of measured) report.errors += p.off.result.errors + p.on.result.errors
}
