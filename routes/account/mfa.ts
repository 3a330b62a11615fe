// Two-step sign-in of the caller's account (docs/second-factor.md, auth-extensions §3):
// enrol, confirm, turn off, new recovery codes. Each that adds or changes a way in needs a
// recent sign-in or step-up (`x-step-up`, §6) besides the password or code it takes.
// Registered by routes/account/index.ts (under /account); the work is accounts/second-factor.ts's.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { clientOf } from '../../client-address.js'
import { errorResponses, NullSuccess, ref } from '../../schemas/common.js'
import { MfaStatus, RecoveryCodes, TotpCodeBody, TotpConfirmBody, TotpEnrolBody, TotpEnrolment } from '../../schemas/second-factor.js'

const STEP_UP_NOTE = 'Only from a session that signed in or stepped up within STEP_UP_MAX_AGE_S (`x-step-up`; otherwise 403 `STEP_UP_REQUIRED`).'

const mfa: FastifyPluginAsyncTypebox = async (fastify) => {
  const { secondFactor } = fastify

  fastify.get('/mfa', {
    schema: {
      tags: ['account'],
      operationId: 'getSecondFactor',
      summary: 'Whether two-step sign-in is on, and how many recovery codes are left',
      response: { 200: ref(MfaStatus) }
    }
  }, async (request) => ({ success: true as const, data: await secondFactor.status(request.user.id) }))

  fastify.post('/mfa/totp', {
    config: { stepUp: true },
    schema: {
      tags: ['account'],
      operationId: 'enrolTotp',
      summary: 'Start two-step sign-in: a TOTP seed for an authenticator app',
      description: 'Checks the current password (400 `INVALID_CURRENT_PASSWORD`, counted as a failed sign-in; `PASSWORD_NOT_SET` for an account ' +
        'without one: set one through the password reset first), then answers a new seed (`secret`, base32) and its `otpauthUrl` for a QR ' +
        'code. Nothing changes for sign-in until POST /account/mfa/totp/confirm takes its first code; enrolling again before that replaces ' +
        'the seed. 409 `MFA_ALREADY_ENABLED` when it is on (turn it off first). 403 `EMAIL_NOT_VERIFIED` while the account\'s address ' +
        'is unconfirmed (a reset never turns TOTP off: a seed set by whoever registered someone else\'s address would lock its owner out). ' +
        '503 `MFA_NOT_CONFIGURED` in production without ' +
        'MFA_ENCRYPTION_KEY. ' + STEP_UP_NOTE,
      body: ref(TotpEnrolBody),
      response: { 200: ref(TotpEnrolment), ...errorResponses(409) }
    }
  }, async (request) => ({ success: true as const, data: await secondFactor.enrol(clientOf(request), request.user, request.body.currentPassword) }))

  fastify.post('/mfa/totp/confirm', {
    config: { stepUp: true },
    schema: {
      tags: ['account'],
      operationId: 'confirmTotp',
      summary: 'Turn two-step sign-in on with the app\'s first code: ten recovery codes, shown once',
      description: 'The code of the seed POST /account/mfa/totp answered (±30 s); it cannot then sign in. A wrong code: 400 `MFA_CODE_INCORRECT`. ' +
        'No enrolment waiting: 409 `MFA_NOT_PENDING`; on already: 409 `MFA_ALREADY_ENABLED`; an unconfirmed address: 403 `EMAIL_NOT_VERIFIED`. From then on every sign-in of the account ' +
        '(password, reset, provider) asks for a code. Records `mfa-enabled` and mails a notice. ' + STEP_UP_NOTE,
      body: ref(TotpConfirmBody),
      response: { 200: ref(RecoveryCodes), ...errorResponses(409) }
    }
  }, async (request) => ({ success: true as const, data: await secondFactor.confirm(clientOf(request), request.user, request.body.code) }))

  fastify.delete('/mfa/totp', {
    config: { stepUp: true },
    schema: {
      tags: ['account'],
      operationId: 'disableTotp',
      summary: 'Turn two-step sign-in off',
      description: 'With the current password and a current code (400 `INVALID_CURRENT_PASSWORD`, `MFA_CODE_INCORRECT`; a recovery code does not ' +
        'turn it off). The seed, the recovery codes and sign-ins waiting for a code go. 409 `MFA_NOT_ENABLED` when it is off. Records ' +
        '`mfa-disabled` and mails a notice. ' + STEP_UP_NOTE,
      body: ref(TotpCodeBody),
      response: { 200: NullSuccess, ...errorResponses(409) }
    }
  }, async (request) => {
    await secondFactor.disable(clientOf(request), request.user, request.body.currentPassword, request.body.code)
    return { success: true as const, data: null }
  })

  fastify.post('/mfa/recovery-codes', {
    config: { stepUp: true },
    schema: {
      tags: ['account'],
      operationId: 'regenerateRecoveryCodes',
      summary: 'Ten new recovery codes; the old ones stop working',
      description: 'With the current password and a current code, as turning it off. Records `recovery-codes-generated` and mails a notice. ' + STEP_UP_NOTE,
      body: ref(TotpCodeBody),
      response: { 200: ref(RecoveryCodes), ...errorResponses(409) }
    }
  }, async (request) => ({
    success: true as const,
    data: await secondFactor.regenerate(clientOf(request), request.user, request.body.currentPassword, request.body.code)
  }))
}

export default mfa
