// Who is asking (STYLE.md: "credentials are read by a list of readers"). Each reader takes one
// kind of credential (the session token, a JWT; the personal API key, known by its prefix:
// accounts/api-keys.ts) and yields one principal: the user, the session behind the credential if it is one,
// and its scopes. The authentication hook (plugins/app/authenticate.ts) hands the presented
// credential to the first reader that takes it; route flags (`scopes`, `stepUp`) are then
// judged on the principal, never on the kind of credential, so a new reader touches no route.
// No Fastify here: the token's verifier is a port the jwt plugin fills.
import type { Kysely } from 'kysely'
import type { Client } from '../client-address.js'
import { touchSession } from '../db/sessions.js'
import type { Database, UserRow } from '../db/types.js'
import { earliestTokenIat, findUserForToken, type TokenHolder } from '../db/users.js'
import { UnauthorizedError } from '../errors.js'
import type { HolderCache } from './holder-cache.js'
import type { PresentedToken } from './sessions.js'

export interface Principal {
  user: UserRow
  /** The session the credential is (how and when its holder proved who they are); null for one that is no session (an API key). */
  session: PresentedToken | null
  /** What it may do: every scope for a session; an API key only its own. */
  scopes: 'all' | ReadonlySet<string>
  /** The API key's id, when the credential is one (for the request log). */
  apiKeyId?: string
}

export interface CredentialReader {
  /** Whether the credential is of this reader's kind (an API key by its prefix). */
  takes: (credential: string) => boolean
  /**
   * Its principal; 401 UNAUTHORIZED when it does not check out. `client`: who presents it (an
   * API key records where it was last used, once a minute), read only when needed: it is not free.
   */
  read: (credential: string, client: () => Client) => Promise<Principal>
}

/** The principal of the first reader that takes the credential; 401 when none does. */
export async function readCredential (readers: readonly CredentialReader[], credential: string, client: () => Client): Promise<Principal> {
  for (const reader of readers) if (reader.takes(credential)) return reader.read(credential, client)
  throw new UnauthorizedError()
}

/** Whether the principal holds every scope a route asks for (`config: { scopes }`). */
export const holdsScopes = (principal: Principal, scopes: readonly string[]): boolean =>
  principal.scopes === 'all' || scopes.every((scope) => (principal.scopes as ReadonlySet<string>).has(scope))

/** A session token's claims, once its signature, algorithm, issuer, audience and times checked out. */
export interface VerifiedTokenClaims { sub: string, jti: string, iat: number, exp: number }

export interface SessionTokenReaderDependencies {
  db: Kysely<Database>
  /** The token's claims when it verifies (the jwt plugin's verifier); throws otherwise. */
  verify: (token: string) => VerifiedTokenClaims
  /** The holders the embedded database's process keeps (accounts/holder-cache.ts); none on a PostgreSQL server. */
  holders?: HolderCache
}

/** A session's "last seen" is written at most once a minute. */
const LAST_SEEN_RESOLUTION_MS = 60_000
/**
 * How far in the future a token's `iat` may be: clocks a little apart (and the next second a
 * token signed within a password change carries). Beyond it a token is refused, or one minted
 * before "sign out everywhere else" by a fast clock would pass for one minted after it.
 */
const IAT_LEEWAY_SECONDS = 5
/** Our jti is a UUID; sessions keep ids up to this long. */
const MAX_JTI_LENGTH = 255

/**
 * The checks on a token's holder row (db/users.ts, tokenHolder), whoever read it: the token
 * reader below, or a route's own statement (`config: { tokenInStatement }`,
 * plugins/app/authenticate.ts). The principal; 401 for a deleted user, a revoked token, a token
 * from before a password change or "sign out everywhere else", or an ended session.
 */
export async function checkTokenHolder (db: Kysely<Database>, claims: VerifiedTokenClaims, holder: TokenHolder | undefined): Promise<Principal> {
  if (holder === undefined || claims.iat < earliestTokenIat(holder.user)) throw new UnauthorizedError()
  const { session } = holder
  if (session === null) {
    // Minted elsewhere with the documented claims: void once "sign out everywhere else" ran after it.
    if (claims.iat < holder.earliestSessionlessIat) throw new UnauthorizedError()
  } else {
    if (session.endedAt !== null) throw new UnauthorizedError()
    if (Date.now() - Date.parse(session.lastSeenAt) >= LAST_SEEN_RESOLUTION_MS) await touchSession(db, claims.jti)
  }
  return {
    user: holder.user,
    scopes: 'all',
    session: {
      jti: claims.jti,
      exp: claims.exp,
      iat: claims.iat,
      hasSession: session !== null,
      // A token signed elsewhere says nothing of how its holder signed in: `external`, as of its `iat` (§6).
      methods: session?.methods ?? ['external'],
      verifiedAt: session === null ? claims.iat * 1000 : session.verifiedAt === null ? 0 : Date.parse(session.verifiedAt)
    }
  }
}

/** The session token's reader, with the check of its claims alone (no query) for a route whose statement reads the holder. */
export interface SessionTokenReader extends CredentialReader {
  /** The claims of a token whose signature, algorithm, issuer, audience and times check out; 401 otherwise. */
  claims: (token: string) => VerifiedTokenClaims
}

/**
 * The session token (ours, or one signed elsewhere with the documented claims): the user and
 * the token's session in one query (db/users.ts, userForToken), the step-up's facts included,
 * so reading it costs what the token check always cost; none while `holders` keeps them.
 * Takes every credential: keep it last.
 */
export function sessionTokenReader ({ db, verify, holders }: SessionTokenReaderDependencies): SessionTokenReader {
  const claimsOf = (token: string): VerifiedTokenClaims => {
    let claims: VerifiedTokenClaims
    try {
      claims = verify(token)
    } catch {
      throw new UnauthorizedError()
    }
    if (claims.iat > Date.now() / 1000 + IAT_LEEWAY_SECONDS || claims.jti.length > MAX_JTI_LENGTH) throw new UnauthorizedError()
    return claims
  }
  return {
    takes: () => true,
    claims: claimsOf,
    async read (token) {
      const claims = claimsOf(token)
      let holder = holders?.get(claims.sub, claims.jti)
      if (holder === undefined) {
        const ticket = holders?.ticket()
        holder = await findUserForToken(db, claims.sub, claims.jti)
        holders?.keep(ticket!, claims.sub, claims.jti, holder)
      }
      return checkTokenHolder(db, claims, holder)
    }
  }
}
