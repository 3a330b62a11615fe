// The sign-in door (accounts/sign-in.ts) with this app's sessions, second factor and token
// signer, and step-up (accounts/step-up.ts) with its password, code and passkey checks, limits and
// window: what every way in, and every step-up, goes through. The only place a session token is signed.
import fp from 'fastify-plugin'
import { signInDoor, type SignInDoor } from '../../accounts/sign-in.js'
import { stepUpService, type StepUp } from '../../accounts/step-up.js'
import { TOKEN_LIFETIME_SECONDS } from '../external/jwt.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The door every way in ends at: `complete(client, user, proof)`; its outcome goes to answerSignIn. */
    signIn: SignInDoor
    stepUp: StepUp
  }
}

export default fp(async function signIn (fastify) {
  fastify.decorate('signIn', signInDoor({
    sessions: fastify.sessions,
    secondFactor: fastify.secondFactor,
    sign: (claims) => fastify.jwt.sign(claims),
    tokenLifetimeSeconds: TOKEN_LIFETIME_SECONDS
  }))
  fastify.decorate('stepUp', stepUpService({
    passwords: fastify.passwords,
    limits: fastify.signInLimits,
    sessions: fastify.sessions,
    secondFactor: fastify.secondFactor,
    passkeys: fastify.passkeys,
    transaction: (change) => fastify.db.transaction().execute(change),
    maxAgeSeconds: fastify.config.auth.stepUpMaxAgeSeconds
  }))
}, { name: 'sign-in', dependencies: ['db', 'sessions', 'second-factor', 'passkeys', 'passwords', 'sign-in-limits', '@fastify/jwt'] })
