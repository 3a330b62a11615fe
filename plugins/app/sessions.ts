// The sessions service (accounts/sessions.ts) for the auth and account routes, and the purges
// of what outlived its use: sessions whose tokens have expired, security events past 90 days.
import fp from 'fastify-plugin'
import { sessionService, type Sessions } from '../../accounts/sessions.js'
import { purgeOldSecurityEvents } from '../../db/security-events.js'
import { purgeExpiredSessions } from '../../db/sessions.js'

declare module 'fastify' {
  interface FastifyInstance {
    sessions: Sessions
  }
}

const PURGE_INTERVAL_MS = 10 * 60_000

export default fp(async function sessions (fastify) {
  const { db, log } = fastify
  fastify.decorate('sessions', sessionService({ db, warn: (err, message) => log.warn({ err }, message) }))

  fastify.jobs.purgeEvery('sessions.purge', PURGE_INTERVAL_MS, async () => {
    const sessions = await purgeExpiredSessions(db)
    const events = await purgeOldSecurityEvents(db)
    return { sessions, events }
  }, { purged: 'expired sessions and old security events purged', failed: 'purging sessions and security events failed' })
}, { name: 'sessions', dependencies: ['db', 'scheduler'] })
