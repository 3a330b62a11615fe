// Summarizes a V8 .cpuprofile (node --cpu-prof): self time by function and by module
// (npm package, service file, Node internals), and inclusive time of the service's own
// functions and of selected packages — where a request's time goes beyond the SQL.
import { readFileSync } from 'node:fs'

interface CallFrame { functionName: string, url: string, lineNumber: number }
interface ProfileNode { id: number, callFrame: CallFrame, children?: number[] }
interface CpuProfile { nodes: ProfileNode[], samples: number[], timeDeltas: number[] }

const META = new Set(['(idle)', '(program)', '(garbage collector)', '(root)'])

export function moduleOf (frame: CallFrame, root: string): string {
  const url = frame.url
  if (url === '') return META.has(frame.functionName) ? frame.functionName : '(native)'
  const nm = url.lastIndexOf('/node_modules/')
  if (nm >= 0) {
    const parts = url.slice(nm + '/node_modules/'.length).split('/')
    return parts[0]?.startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0] ?? url
  }
  if (url.startsWith('node:')) return `node:${url.slice(5).split('/').slice(0, 2).join('/')}`
  const path = url.replace(/^file:\/\//, '')
  if (path.startsWith(root)) return `app: ${path.slice(root.length).replace(/^\/?(dist\/)?/, '')}`
  return path
}

export interface ProfileSummary {
  totalMs: number
  idleMs: number
  busyMs: number
  gcMs: number
  bySelfModule: Array<[string, number]>
  bySelfFunction: Array<[string, number]>
  byInclusiveFunction: Array<[string, number]>
}

/**
 * `window` (milliseconds since the profile started, i.e. since the process started) keeps
 * only the samples of the measured run: start-up, warm-up and idle waits are left out.
 */
export function summarizeProfile (file: string, root: string, window?: { from: number, to: number }): ProfileSummary {
  const profile = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile
  const byId = new Map<number, ProfileNode>()
  const parent = new Map<number, number>()
  for (const node of profile.nodes) {
    byId.set(node.id, node)
    for (const child of node.children ?? []) parent.set(child, node.id)
  }
  const label = (frame: CallFrame) => {
    const mod = moduleOf(frame, root)
    return `${frame.functionName || '(anonymous)'} [${mod}${frame.url && !mod.startsWith('(') ? `:${frame.lineNumber + 1}` : ''}]`
  }
  const selfModule = new Map<string, number>()
  const selfFunction = new Map<string, number>()
  const inclusive = new Map<string, number>()
  let total = 0
  let idle = 0
  let gc = 0
  const add = (map: Map<string, number>, key: string, ms: number) => map.set(key, (map.get(key) ?? 0) + ms)
  let clock = 0
  profile.samples.forEach((id, i) => {
    const ms = (profile.timeDeltas[i] ?? 0) / 1000
    clock += ms
    if (window !== undefined && (clock < window.from || clock > window.to)) return
    const node = byId.get(id)
    if (node === undefined || ms <= 0) return
    total += ms
    if (node.callFrame.functionName === '(idle)') { idle += ms; return }
    if (node.callFrame.functionName === '(garbage collector)') gc += ms
    add(selfModule, moduleOf(node.callFrame, root), ms)
    add(selfFunction, label(node.callFrame), ms)
    // Inclusive: every distinct function on the stack of this sample.
    const seen = new Set<string>()
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const frame = byId.get(at)?.callFrame
      if (frame === undefined || frame.functionName === '(root)') continue
      const key = label(frame)
      if (!seen.has(key)) { seen.add(key); add(inclusive, key, ms) }
    }
  })
  const sorted = (map: Map<string, number>) => [...map.entries()].sort((a, b) => b[1] - a[1])
  return {
    totalMs: total,
    idleMs: idle,
    busyMs: total - idle,
    gcMs: gc,
    bySelfModule: sorted(selfModule),
    bySelfFunction: sorted(selfFunction),
    byInclusiveFunction: sorted(inclusive)
  }
}

export function formatProfile (summary: ProfileSummary, requests?: number, top = 25): string {
  const perRequest = (ms: number) => requests ? `  ${(1000 * ms / requests).toFixed(0).padStart(5)} µs/req` : ''
  const pct = (ms: number) => `${(100 * ms / summary.busyMs).toFixed(1).padStart(5)} %${perRequest(ms)}`
  const lines = [
    `CPU profile of the main thread over the measured run: ${(summary.totalMs / 1000).toFixed(1)} s, busy ${(summary.busyMs / 1000).toFixed(1)} s ` +
      `(${(100 * summary.busyMs / summary.totalMs).toFixed(0)} %), GC ${(100 * summary.gcMs / summary.busyMs).toFixed(1)} % of busy` +
      (requests ? `; ${requests} responses, ${(1000 * summary.busyMs / requests).toFixed(0)} µs of CPU each` : ''),
    '', 'Self time by module (% of busy):'
  ]
  for (const [name, ms] of summary.bySelfModule.slice(0, top)) lines.push(`  ${pct(ms)}  ${name}`)
  lines.push('', 'Self time by function (% of busy):')
  for (const [name, ms] of summary.bySelfFunction.slice(0, top)) lines.push(`  ${pct(ms)}  ${name}`)
  lines.push('', 'Inclusive time (on the stack), functions of the app and of fastify/kysely/pg/plugins (% of busy):')
  const interesting = summary.byInclusiveFunction.filter(([name]) =>
    /\[(app: |fastify|@fastify\/|kysely|pg|pg-pool|pg-protocol|pino|fast-json-stringify|fast-jwt|find-my-way|light-my-request|avvio|ajv)/.test(name))
  for (const [name, ms] of interesting.slice(0, top + 15)) lines.push(`  ${pct(ms)}  ${name}`)
  return lines.join('\n')
}
