// CORS for the web client at APP_URL (and CORS_ORIGINS), with credentials (the auth cookie); never `*`.
import cors, { type FastifyCorsOptions } from '@fastify/cors'
import type { FastifyInstance } from 'fastify'
import { allowedOrigins } from '../../schemas/config.js'

export const autoConfig = (fastify: FastifyInstance): FastifyCorsOptions => ({
  origin: allowedOrigins(fastify.config),
  credentials: true,
  methods: ['GET', 'POST', 'PATCH', 'PUT', 'DELETE'],
  exposedHeaders: ['X-Total-Count', 'X-Request-Id'],
  maxAge: 600
})

export default cors
