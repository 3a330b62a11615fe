// Password hashing: bcrypt with 12 rounds (spec §8). Login compares against a dummy
// hash when the email is unknown, so both failures cost the same.
import bcrypt from 'bcryptjs'
import fp from 'fastify-plugin'

export const BCRYPT_ROUNDS = 12
// A valid 12-round hash of a random string nobody knows.
const DUMMY_HASH = '$2b$12$zPYEbx98NwUrVW5fAB6Y4ugPGDuDsru5qHhmXFUXVRT8ysrOEvwsS'

export interface Passwords {
  hash: (password: string) => Promise<string>
  verify: (password: string, hash: string | undefined) => Promise<boolean>
}

declare module 'fastify' {
  interface FastifyInstance {
    passwords: Passwords
  }
}

export default fp(async function passwords (fastify) {
  fastify.decorate('passwords', {
    hash: (password: string) => bcrypt.hash(password, BCRYPT_ROUNDS),
    async verify (password: string, hash: string | undefined) {
      const matches = await bcrypt.compare(password, hash ?? DUMMY_HASH)
      return matches && hash !== undefined
    }
  } satisfies Passwords)
}, { name: 'passwords' })
