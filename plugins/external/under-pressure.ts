// Load shedding: when the event loop lags past MAX_EVENT_LOOP_DELAY_MS, answer 503 with
// Retry-After at once rather than letting every request time out. Liveness stays up.
import underPressure, { type FastifyUnderPressureOptions } from '@fastify/under-pressure'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { BusyError } from '../../errors.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** false: answered even under pressure (liveness says whether the process lives, not whether it is busy). */
    shedUnderPressure?: boolean
  }
}

// A rejected promise goes to the service's error handler (503 OVERLOADED with Retry-After),
// like every other refusal; a resolved one lets the request through.
async function pressureHandler (request: FastifyRequest): Promise<void> {
  if (request.routeOptions.config.shedUnderPressure === false) return
  throw new BusyError()
}

export const autoConfig = (fastify: FastifyInstance): FastifyUnderPressureOptions => ({
  maxEventLoopDelay: fastify.config.MAX_EVENT_LOOP_DELAY_MS,
  pressureHandler: pressureHandler as unknown as FastifyUnderPressureOptions['pressureHandler']
})

export default underPressure
