// Load shedding: when the event loop lags past MAX_EVENT_LOOP_DELAY_MS, answer 503 with
// Retry-After at once rather than letting every request time out. Liveness stays up.
import underPressure, { type FastifyUnderPressureOptions } from '@fastify/under-pressure'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { BUSY_RETRY_AFTER_SECONDS } from '../../schemas/errors.js'

// At run time a non-null return value is sent as the reply (the typings say void).
function pressureHandler (request: FastifyRequest, reply: FastifyReply) {
  // /health answers whether the process lives, not whether it is busy.
  if (request.routeOptions.url === '/health') return undefined
  reply.code(503).header('retry-after', String(BUSY_RETRY_AFTER_SECONDS))
  return { success: false, error: 'Service unavailable' }
}

export const autoConfig = (fastify: FastifyInstance): FastifyUnderPressureOptions => ({
  maxEventLoopDelay: fastify.config.MAX_EVENT_LOOP_DELAY_MS,
  retryAfter: BUSY_RETRY_AFTER_SECONDS,
  pressureHandler: pressureHandler as unknown as FastifyUnderPressureOptions['pressureHandler']
})

export default underPressure
