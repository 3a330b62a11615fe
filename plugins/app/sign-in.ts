// The sign-in door (accounts/sign-in.ts) with this app's sessions and token signer: what every
// way in goes through. The only place a session token is signed.
import fp from 'fastify-plugin'
import { signInDoor, type SignInDoor } from '../../accounts/sign-in.js'
import { TOKEN_LIFETIME_SECONDS } from '../external/jwt.js'

declare module 'fastify' {
  interface FastifyInstance {
    /** The door every way in ends at: `complete(client, user, proof)`; its outcome goes to answerSignIn. */
    signIn: SignInDoor
  }
}

export default fp(async function signIn (fastify) {
  fastify.decorate('signIn', signInDoor({
    sessions: fastify.sessions,
    sign: (claims) => fastify.jwt.sign(claims),
    tokenLifetimeSeconds: TOKEN_LIFETIME_SECONDS
  }))
}, { name: 'sign-in', dependencies: ['sessions', '@fastify/jwt'] })
