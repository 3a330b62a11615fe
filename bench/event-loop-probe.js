// Preloaded into the service by the benchmark (`node --import ./bench/event-loop-probe.js
// dist/server.js`), so event-loop delay is measured inside the service process without
// touching its code. It listens on the Unix socket $BENCH_ELD_SOCKET (unref'd: it never
// keeps the process alive); each connection gets the percentiles since the previous one,
// as one JSON line, and starts a new window. (Not a signal: close-with-grace treats
// SIGUSR2 as a shutdown request, and SIGUSR1 belongs to Node's inspector.)
// Values are milliseconds of delay beyond the 10 ms sampling interval (as
// @fastify/under-pressure reports it): 0 means timers fire on time.
import net from 'node:net'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { isMainThread } from 'node:worker_threads'

const socketPath = process.env.BENCH_ELD_SOCKET
// --import runs in worker threads too (e.g. a bcrypt pool): only the main thread serves.
if (socketPath && isMainThread) {
  const RESOLUTION_MS = 10
  const histogram = monitorEventLoopDelay({ resolution: RESOLUTION_MS })
  histogram.enable()
  let seq = 0
  const ms = (ns) => Math.max(0, Math.round((ns / 1e6 - RESOLUTION_MS) * 100) / 100)
  const server = net.createServer((socket) => {
    const snapshot = {
      seq: ++seq,
      at: Date.now(),
      count: histogram.count,
      mean: ms(histogram.mean),
      p50: ms(histogram.percentile(50)),
      p90: ms(histogram.percentile(90)),
      p99: ms(histogram.percentile(99)),
      max: ms(histogram.max)
    }
    histogram.reset()
    socket.end(JSON.stringify(snapshot) + '\n')
  })
  server.on('error', (err) => console.error(`event-loop probe: ${err.message}`))
  server.listen(socketPath)
  server.unref()

  // Says on stderr which signal ended the process (the service logs it only at info level).
  // Observation only: a signal nobody else handles still gets its default action.
  for (const signal of ['SIGHUP', 'SIGINT', 'SIGQUIT', 'SIGTERM', 'SIGUSR2']) {
    const observe = () => {
      console.error(`bench probe: ${signal} received`)
      if (process.listenerCount(signal) === 1) {
        process.removeListener(signal, observe)
        process.kill(process.pid, signal)
      }
    }
    process.on(signal, observe)
  }
  process.on('exit', (code) => console.error(`bench probe: exit code ${code}`))
}
