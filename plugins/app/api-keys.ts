// Personal API keys (accounts/api-keys.ts) with this app's database, mail and limits; and the
// reader the authentication hook puts before the session token's (plugins/app/authenticate.ts),
// with each key's per-minute count (API_KEY_RATE_LIMIT_MAX) in Redis when REDIS_URL is set, so
// every instance shares it, otherwise in memory. Dead keys' rows go after 30 days.
import fp from 'fastify-plugin'
import { apiKeyReader, apiKeyService, type ApiKeyReader, type ApiKeys } from '../../accounts/api-keys.js'
import { memoryCounters } from '../../accounts/limits.js'
import { outboxMail } from '../../accounts/mail.js'
import { purgeDeadApiKeys } from '../../db/api-keys.js'
import { redisCounters } from './sign-in-limits.js'

declare module 'fastify' {
  interface FastifyInstance {
    apiKeys: ApiKeys
    apiKeyReader: ApiKeyReader
  }
}

const PURGE_INTERVAL_MS = 60 * 60_000

export default fp(async function apiKeys (fastify) {
  const { config, db, log } = fastify
  fastify.decorate('apiKeys', apiKeyService({ db, mail: outboxMail(fastify.mail, fastify.signInLimits.admitInbox), limits: fastify.signInLimits }))
  const counters = fastify.redis === null
    ? memoryCounters()
    : redisCounters(fastify.redis, 'tsb-api-key-', (err) => log.debug({ err }, 'API key limit: redis unavailable, letting requests through'))
  fastify.decorate('apiKeyReader', apiKeyReader({ db, counters, perMinute: config.limits.apiKeyPerMinute }))

  fastify.jobs.purgeEvery('api-keys.purge', PURGE_INTERVAL_MS, async () => { await purgeDeadApiKeys(db) }, { failed: 'purging dead API keys failed' })
}, { name: 'api-keys', dependencies: ['db', 'redis', 'sign-in-limits', 'mailer', 'scheduler'] })
