// --soak: minutes of mixed load, and whether the service's RSS grew over them (the median
// at 15–45 s against the median over the last 30 s).
import type { Bench } from './context.js'
import { runLoad, type Request } from './load.js'
import { describe, fmt, log, step } from './log.js'
import { rssMB } from './proc.js'

export async function runSoak ({ options, service, requests, report }: Bench): Promise<void> {
  const { connections, settings } = options
  const seconds = settings.soakMinutes * 60
  step(`soak: ${settings.soakMinutes} min of mixed load (lists, filtered lists, preferences, creates, updates, health)`)
  const mix: Request[] = [requests.listTasks(), requests.listTasks('?status=todo&limit=20'), ...requests.for('preferences.get'), ...requests.for('tasks.create'), ...requests.for('tasks.update'), ...requests.for('health')]
  await service.waitIdle()
  service.sampler.record(true)
  const startedAt = Date.now()
  const ticker = setInterval(() => log(`  ${Math.round((Date.now() - startedAt) / 1000)} s: RSS ${fmt(rssMB(service.proc!.pid), 0)} MB`), 60_000)
  const result = await runLoad({ url: service.url, connections, duration: seconds, requests: mix })
  clearInterval(ticker)
  const samples = service.sampler.record(false)
  const median = (xs: number[]) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)] ?? NaN }
  const between = (from: number, to: number) => samples.filter((s) => s.t - startedAt >= from * 1000 && s.t - startedAt < to * 1000).map((s) => s.mb)
  const soak = { rssBeforeMB: Math.round(median(between(15, 45))), rssAfterMB: Math.round(median(between(seconds - 30, seconds + 1))) }
  report.soak = soak
  describe('soak (mixed)', { result })
  const range = (xs: number[]) => xs.length === 0 ? '—' : `${fmt(Math.min(...xs), 0)}–${fmt(Math.max(...xs), 0)}`
  log(`  RSS median at 15–45 s: ${soak.rssBeforeMB} MB (range ${range(between(15, 45))}); ` +
    `over the last 30 s: ${soak.rssAfterMB} MB (range ${range(between(seconds - 30, seconds + 1))})`)
  report.row('soak (mixed)', result, Math.max(...samples.map((s) => s.mb)), null, '', null)
  report.errors += result.errors
}
