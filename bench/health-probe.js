// A load balancer's health check, as a process of its own (`node bench/health-probe.js URL
// INTERVAL_MS DURATION_MS`): opens its kept-alive connection with one request not counted
// and says `ready` on stdout, then sends GET URL every INTERVAL_MS on that connection for
// DURATION_MS, then prints one JSON line with the latencies in ms (count, p50, p99, max) and
// the failures. bench/health-under-load.ts starts the load once it is ready. With
// PROBE_AUTHORIZATION in its environment it sends that Authorization header (bench/heavy-pages.ts
// probes another user's GET /tasks this way).
import http from 'node:http'

const [url, intervalMs, durationMs] = [process.argv[2], Number(process.argv[3] ?? 100), Number(process.argv[4] ?? 10_000)]
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
const headers = process.env.PROBE_AUTHORIZATION ? { authorization: process.env.PROBE_AUTHORIZATION } : {}

function probe () {
  return new Promise((resolve) => {
    const started = performance.now()
    const req = http.get(url, { agent, headers, timeout: 5000 }, (res) => {
      res.resume()
      res.on('end', () => resolve({ ms: performance.now() - started, ok: res.statusCode === 200 }))
    })
    req.on('timeout', () => req.destroy(new Error('timeout')))
    req.on('error', () => resolve({ ms: performance.now() - started, ok: false }))
  })
}

// A load balancer keeps its connection: connecting is not part of what is measured.
await probe()
console.log('ready')

const latencies = []
let failures = 0
const end = performance.now() + durationMs
// One probe per slot: a slow answer delays the next probe, as a load balancer's would.
for (let next = performance.now(); next < end; next += intervalMs) {
  const wait = next - performance.now()
  if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait))
  const { ms, ok } = await probe()
  latencies.push(ms)
  if (!ok) failures++
}
agent.destroy()
latencies.sort((a, b) => a - b)
const at = (q) => latencies.length === 0 ? 0 : Math.round(100 * latencies[Math.min(latencies.length - 1, Math.ceil(q * latencies.length) - 1)]) / 100
console.log(JSON.stringify({ count: latencies.length, p50: at(0.5), p99: at(0.99), max: at(1), failures }))
