// CORS for the web client at APP_URL, with credentials (the auth cookie); never `*`.
import cors, { type FastifyCorsOptions } from '@fastify/cors'
import type { FastifyInstance } from 'fastify'

export const autoConfig = (fastify: FastifyInstance): FastifyCorsOptions => ({
  origin: [new URL(fastify.config.APP_URL).origin],
  credentials: true,
  methods: ['GET', 'POST', 'PATCH', 'PUT', 'DELETE'],
  exposedHeaders: ['X-Total-Count', 'X-Request-Id'],
  maxAge: 600
})

export default cors
