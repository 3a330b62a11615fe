// Passkeys (accounts/passkeys.ts) with this app's database, mail, limits and APP_URL (the
// relying party), and the purge of ceremonies' challenges. The second factor and step-up take
// passkeys from here (plugins/app/second-factor.ts, plugins/app/sign-in.ts).
import { hkdfSync } from 'node:crypto'
import fp from 'fastify-plugin'
import { outboxMail } from '../../accounts/mail.js'
import { passkeyService, type Passkeys } from '../../accounts/passkeys.js'
import { purgeExpiredWebAuthnChallenges } from '../../db/passkeys.js'
import { PASSKEY_SCHEMAS } from '../../schemas/passkeys.js'

declare module 'fastify' {
  interface FastifyInstance {
    passkeys: Passkeys
  }
}

const PURGE_INTERVAL_MS = 10 * 60_000

export default fp(async function passkeys (fastify) {
  const { config, db } = fastify
  // Shared by the routes that take an assertion (sign-in, the second factor, step-up) and that show a passkey.
  for (const schema of PASSKEY_SCHEMAS) fastify.addSchema(schema)
  fastify.decorate('passkeys', passkeyService({
    db,
    mail: outboxMail(fastify.mail, fastify.signInLimits.admitInbox),
    limits: fastify.signInLimits,
    sessions: fastify.sessions,
    appUrl: config.http.appUrl,
    providers: config.identityProviders.map((provider) => provider.id),
    decoyKey: Buffer.from(hkdfSync('sha256', config.auth.jwtSecret, 'task-app', 'passkey decoy credentials v1', 32))
  }))

  fastify.jobs.purgeEvery('passkeys.purge-challenges', PURGE_INTERVAL_MS, async () => ({ purged: await purgeExpiredWebAuthnChallenges(db) }),
    { purged: 'expired passkey challenges purged', failed: 'purging passkey challenges failed' })
}, { name: 'passkeys', dependencies: ['db', 'mailer', 'sign-in-limits', 'sessions', 'scheduler'] })
