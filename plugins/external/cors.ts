// CORS for the web client at APP_URL (and CORS_ORIGINS), with credentials (the auth cookie);
// never `*`. Only a request from an allowed origin gets CORS headers (with Vary: Origin on
// every answer): a request without an Origin header (load balancers, Stripe, servers) or
// from another site gets none, rather than Allow-Credentials and Expose-Headers that mean
// nothing to it. A preflight from another site is a 404.
import cors, { type FastifyCorsOptions } from '@fastify/cors'
import type { FastifyInstance } from 'fastify'
import { allowedOrigins } from '../../config.js'

export const autoConfig = (fastify: FastifyInstance): FastifyCorsOptions => {
  const allowed = new Set(allowedOrigins(fastify.config))
  return {
    origin: (origin, callback) => callback(null, origin !== undefined && allowed.has(origin) ? origin : false),
    credentials: true,
    methods: ['GET', 'POST', 'PATCH', 'PUT', 'DELETE'],
    exposedHeaders: ['X-Total-Count', 'X-Request-Id'],
    maxAge: 600
  }
}

export default cors
