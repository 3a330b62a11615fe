// The accounts service (accounts/service.ts), built from this app's database, hashing pool,
// sign-in limits and mail, for the auth and account routes.
import fp from 'fastify-plugin'
import { outboxMail } from '../../accounts/mail.js'
import { accountService, type Accounts } from '../../accounts/service.js'

declare module 'fastify' {
  interface FastifyInstance {
    accounts: Accounts
  }
}

export default fp(async function accounts (fastify) {
  fastify.decorate('accounts', accountService({
    db: fastify.db,
    passwords: fastify.passwords,
    limits: fastify.signInLimits,
    mail: outboxMail(fastify.mail, fastify.signInLimits.admitInbox),
    sessions: fastify.sessions
  }))
}, { name: 'accounts', dependencies: ['db', 'passwords', 'sign-in-limits', 'mailer', 'sessions'] })
