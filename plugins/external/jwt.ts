// JWT: HS256 only, issuer and audience pinned, exp/iat/sub/jti required (docs/api.md, Tokens).
import jwt, { type FastifyJWTOptions } from '@fastify/jwt'
import type { FastifyInstance } from 'fastify'
import type { UserRow } from '../../db/types.js'

/** Spec §5.1's claims (with `iss`, `aud`, `exp` added by the signer) and a unique `jti`. */
export interface TokenClaims {
  sub: string
  email: string
  jti: string
  /** Set by the signer unless given (within the second of a password change, the next second). */
  iat?: number
}

declare module '@fastify/jwt' {
  interface FastifyJWT {
    payload: TokenClaims
    // request.user is the user loaded from the database by the authenticate hook.
    user: UserRow
  }
}

export type VerifiedClaims = TokenClaims & { iat: number, exp: number, iss: string, aud: string }

export const TOKEN_LIFETIME_SECONDS = 7 * 24 * 60 * 60

/** Verified tokens kept at most (~200 bytes each). */
const VERIFIED_TOKENS_KEPT = 10_000

export const autoConfig = (fastify: FastifyInstance): FastifyJWTOptions => ({
  secret: fastify.config.auth.jwtSecret,
  sign: {
    algorithm: 'HS256',
    iss: fastify.config.http.appUrl,
    aud: fastify.config.http.apiUrl,
    expiresIn: `${TOKEN_LIFETIME_SECONDS}s`
  },
  verify: {
    algorithms: ['HS256'],
    allowedIss: fastify.config.http.appUrl,
    allowedAud: fastify.config.http.apiUrl,
    requiredClaims: ['exp', 'iat', 'sub', 'jti', 'iss', 'aud'],
    // Verified tokens are kept (fast-jwt's LRU, keyed by the token's SHA-256, each until its exp at
    // the latest): a request with a token seen before skips the HMAC and the claims' checks. Only
    // the signature's verdict is kept; the holder is read on every request.
    cache: VERIFIED_TOKENS_KEPT
  },
  // Our authenticate hook sets request.user to the database user; keep the raw claims apart.
  decoratorName: 'tokenClaims'
})

export default jwt
