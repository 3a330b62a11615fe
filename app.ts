// The service as a Fastify plugin: the core plugins (errors, JSON bodies, shared schemas,
// body limits, validation, response headers), then plugins/external → plugins/app → routes by autoload. server.ts,
// the tests and the OpenAPI generator build it the same way, from serverOptions() and a
// loaded configuration.
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import autoload from '@fastify/autoload'
import type { FastifyInstance } from 'fastify'
import bodyLimits from './plugins/body-limits.js'
import errors from './plugins/errors.js'
import jsonBody from './plugins/json-body.js'
import responseHeaders from './plugins/response-headers.js'
import sharedSchemas from './plugins/shared-schemas.js'
import tracing from './plugins/tracing.js'
import validation from './plugins/validation.js'
import type { AppConfig } from './config.js'

declare module 'fastify' {
  interface FastifyInstance {
    config: AppConfig
  }
  interface FastifyContextConfig {
    /** false: no per-request log line (health checks). */
    logRequest?: boolean
  }
}

export interface AppOptions {
  config: AppConfig
}

const dirname = path.dirname(fileURLToPath(import.meta.url))

export default async function serviceApp (fastify: FastifyInstance, opts: AppOptions) {
  fastify.decorate('config', opts.config)
  // First: with tracing on, every hook and route added after it is seen by the request span.
  await fastify.register(tracing)
  await fastify.register(errors)
  await fastify.register(jsonBody)
  await fastify.register(sharedSchemas)
  await fastify.register(bodyLimits)
  await fastify.register(validation)
  // Before any other plugin, so its onRequest hook runs first and every answer carries its headers.
  await fastify.register(responseHeaders)
  // Plugins read fastify.config themselves; `options: {}` is what autoload needs for autoConfig functions.
  await fastify.register(autoload, { dir: path.join(dirname, 'plugins/external'), options: {} })
  await fastify.register(autoload, { dir: path.join(dirname, 'plugins/app'), options: {}, ignorePattern: /\.worker\.[jt]s$/ })
  await fastify.register(autoload, { dir: path.join(dirname, 'routes'), options: {} })
}
