// Load shedding: when the event loop lags past MAX_EVENT_LOOP_DELAY_MS, answer 503 with
// Retry-After at once rather than letting every request time out. Liveness stays up.
import underPressure, { type FastifyUnderPressureOptions } from '@fastify/under-pressure'
import type { FastifyInstance, FastifyPluginAsync } from 'fastify'
import fp from 'fastify-plugin'
import { performance } from 'node:perf_hooks'
import { BusyError } from '../../errors.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** false: answered even under pressure (liveness says whether the process lives, not whether it is busy). */
    shedUnderPressure?: boolean
  }
}

// under-pressure samples the lag once a second (its default sampleInterval), from its
// registration on. The first sample after the app is ready can still hold the start-up's own
// blocking (module loading, schema compilation: over a second on a busy machine); the second
// holds none of it. Until then the lag is the start-up's, not load, and nothing is shed.
const SAMPLE_INTERVAL_MS = 1000
const START_UP_SAMPLES_MS = 2 * SAMPLE_INTERVAL_MS

export const autoConfig = (fastify: FastifyInstance): FastifyUnderPressureOptions => ({
  maxEventLoopDelay: fastify.config.http.maxEventLoopDelayMs,
  sampleInterval: SAMPLE_INTERVAL_MS
})

const shedding: FastifyPluginAsync<FastifyUnderPressureOptions> = async (fastify, opts) => {
  let shedsFrom = Infinity
  fastify.addHook('onReady', async () => { shedsFrom = performance.now() + START_UP_SAMPLES_MS })
  await fastify.register(underPressure, {
    ...opts,
    // A rejected promise goes to the service's error handler (503 OVERLOADED with
    // Retry-After), like every other refusal; a resolved one lets the request through.
    pressureHandler: (async (request) => {
      if (request.routeOptions.config.shedUnderPressure === false || performance.now() < shedsFrom) return
      throw new BusyError()
    }) as FastifyUnderPressureOptions['pressureHandler']
  })
}

export default fp(shedding, { name: 'shedding' })
