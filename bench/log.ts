// The console: steps with their time, numbers as the table shows them, and the line that
// sums up one run.
import type { LoadResult } from './load.js'

export const log = (...args: unknown[]) => console.log(...args)
const stamp = () => new Date().toISOString().slice(11, 19)
export const step = (text: string) => log(`\n[${stamp()}] ${text}`)

export const fmt = (n: number | null | undefined, digits = 1) => n === null || n === undefined || Number.isNaN(n) ? '—' : n.toFixed(digits)

/** One run in a line: req/s, latencies, errors, and what was watched beside it. */
export function describe (name: string, m: { result: LoadResult, rssMB?: number, eventLoop?: { p99: number }, others?: number }): void {
  const r = m.result
  const codes = Object.entries(r.statusCodes).map(([code, count]) => `${code}×${count}`).join(' ')
  log(`  ${name.padEnd(22)} ${String(r.rps).padStart(6)} req/s  p50 ${fmt(r.p50)}  p90 ${fmt(r.p90)}  p99 ${fmt(r.p99)}  max ${fmt(r.max)} ms` +
    `  errors ${r.errors}${r.timeouts ? ` (${r.timeouts} timeouts)` : ''}${m.rssMB ? `  RSS ${fmt(m.rssMB, 0)} MB` : ''}` +
    `${m.eventLoop ? `  loop p99 ${fmt(m.eventLoop.p99)} ms` : ''}${m.others !== undefined ? `  others ${fmt(m.others)} cores` : ''}  [${codes}]`)
}
