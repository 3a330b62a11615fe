// The second factor (accounts/second-factor.ts) with this app's database, mail, hashing pool and
// limits, and its sealing key: MFA_ENCRYPTION_KEY (and _PREVIOUS, still read). Outside
// production an unset key is derived from the JWT secret, so enrolment works with no
// configuration; in production it stays unset until configured (enrolment answers 503
// MFA_NOT_CONFIGURED), and start-up is refused once any user has the factor on without it.
import { hkdfSync } from 'node:crypto'
import fp from 'fastify-plugin'
import { outboxMail } from '../../accounts/mail.js'
import { secondFactorService, type SecondFactor } from '../../accounts/second-factor.js'
import { createSealer, parseSealKey, type Sealer } from '../../accounts/secret-seal.js'
import type { AppConfig } from '../../config.js'
import { anyTotp, purgeExpiredChallenges } from '../../db/second-factor.js'
import { StartRefusal } from '../../errors.js'

declare module 'fastify' {
  interface FastifyInstance {
    secondFactor: SecondFactor
  }
}

const PURGE_INTERVAL_MS = 10 * 60_000

/** The sealer of MFA_ENCRYPTION_KEY (config.ts checked its form), or of a key derived from the JWT secret outside production; null in production without one. */
function sealerOf (config: AppConfig): Sealer | null {
  const { mfaEncryptionKey, mfaEncryptionKeyPrevious, jwtSecret } = config.auth
  if (mfaEncryptionKey !== undefined) {
    return createSealer({
      current: parseSealKey(mfaEncryptionKey),
      ...(mfaEncryptionKeyPrevious !== undefined && { previous: parseSealKey(mfaEncryptionKeyPrevious, 'MFA_ENCRYPTION_KEY_PREVIOUS') })
    })
  }
  if (config.production) return null
  return createSealer({ current: Buffer.from(hkdfSync('sha256', jwtSecret, 'task-app', 'totp seeds v1 (development)', 32)) })
}

export default fp(async function secondFactor (fastify) {
  const { config, db, log } = fastify
  const sealer = sealerOf(config)
  // Once the schema is checked (plugins/app/db.ts waits for it in its own onReady, before this one).
  if (sealer === null) {
    fastify.addHook('onReady', async () => {
      if (await anyTotp(db)) throw new StartRefusal('MFA_ENCRYPTION_KEY is required: users have two-step sign-in on, and their TOTP seeds are sealed with it')
    })
  }
  fastify.decorate('secondFactor', secondFactorService({
    db,
    mail: outboxMail(fastify.mail, fastify.signInLimits.admitInbox),
    passwords: fastify.passwords,
    limits: fastify.signInLimits,
    sessions: fastify.sessions,
    passkeys: fastify.passkeys,
    sealer,
    issuer: new URL(config.http.appUrl).host,
    warn: (err, message) => log.warn({ err }, message)
  }))

  fastify.jobs.purgeEvery('second-factor.purge-challenges', PURGE_INTERVAL_MS, async () => ({ purged: await purgeExpiredChallenges(db) }),
    { purged: 'expired second-factor challenges purged', failed: 'purging second-factor challenges failed' })
}, { name: 'second-factor', dependencies: ['db', 'passwords', 'sign-in-limits', 'mailer', 'sessions', 'scheduler', 'passkeys'] })
