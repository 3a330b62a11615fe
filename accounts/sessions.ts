// Sessions users can see and end, and the security-events feed (docs/sessions.md). Every
// sign-in starts a session keyed by its token's `jti` and records a "sign-in" event in the
// same transaction; ending one marks its row, which the token check (db/users.ts) reads on the
// query that loads the user, so an ended session is refused at once by every instance.
// No Fastify here: the client comes in as plain facts.
import type { Kysely } from 'kysely'
import type { Client } from '../client-address.js'
import { listSecurityEvents, recordFailedSignIn, recordSecurityEvent } from '../db/security-events.js'
import { voidSignInState } from '../db/identities.js'
import { voidChallenges } from '../db/second-factor.js'
import { createSession, endOtherTokens, endSession, endSessions, listLiveSessions, recordStepUp } from '../db/sessions.js'
import { revokeToken } from '../db/revoked-tokens.js'
import { holdUserWithPassword } from '../db/users.js'
import type { AuthMethod, Database, SecurityEventRow, SessionMethod, SessionRow } from '../db/types.js'
import { SessionNotFoundError, UnauthorizedError } from '../errors.js'
import { recordedClient } from './limits.js'

/** The most sessions a list shows (a user has far fewer live ones). */
export const MAX_LISTED_SESSIONS = 100

/** The presented token, as far as sessions care. */
export interface PresentedToken {
  jti: string
  /** Its expiry, whole seconds since the epoch. */
  exp: number
  /** When it was signed, whole seconds since the epoch. */
  iat: number
  /** False for a token minted elsewhere with the documented claims (no session row). */
  hasSession: boolean
  /** The factors its holder proved: its session's; `external` for a token without one. */
  methods: AuthMethod[]
  /**
   * When its holder last proved who they are, ms since the epoch: the session's sign-in or last
   * step-up, whichever came later; for a token without a session, its `iat` (auth-extensions §6).
   */
  verifiedAt: number
}

/**
 * Ends every way the user is signed in, in `tx`, but `exceptId`'s session: sign-ins still on
 * their way first (links in flight, provider codes not yet exchanged, sign-ins waiting for their
 * second factor), then the sessions. In this order a sign-in completing meanwhile either loses
 * its use-once update to the void, or committed first, and then its session is one the last
 * statement ends. The number of sessions ended.
 */
export async function endSignIns (tx: Kysely<Database>, userId: string, exceptId?: string): Promise<number> {
  await voidSignInState(tx, userId)
  await voidChallenges(tx, userId)
  return endSessions(tx, userId, exceptId)
}

export interface SessionStart {
  id: string
  userId: string
  method: SessionMethod
  /** The factors the sign-in proved. */
  methods: AuthMethod[]
  /** When (the app's clock: it is what judges a step-up's window). */
  authenticatedAt: Date
  provider?: string
  client: Client
  expiresAt: Date
  /**
   * The account's password hash (or null) as it was when the sign-in was proved: the session
   * starts only while it still is. Left out where the caller's transaction already used what a
   * password change voids (a second factor's challenge, endSignIns): a change then waits for that
   * transaction or it for the change, and a lock on the user's row as well would let each wait
   * for the other.
   */
  password?: string | null
}

export interface Sessions {
  /**
   * A new session and its "sign-in" event, in one transaction (`tx`, when the caller's has more
   * to do); false, and nothing started, when the account's password changed since the sign-in
   * was proved (a change or reset ends every sign-in in flight).
   */
  start: (session: SessionStart, tx?: Kysely<Database>) => Promise<boolean>
  /** The user's live sessions, newest first. */
  list: (userId: string) => Promise<SessionRow[]>
  /** 404 SESSION_NOT_FOUND unless `id` is a live session of the user. */
  end: (userId: string, id: string, client: Client) => Promise<void>
  /**
   * Ends every session of the user but the presented token's, and every token minted
   * elsewhere: a presented token without a session becomes one, so it survives. How many ended.
   */
  endOthers: (userId: string, current: PresentedToken, client: Client) => Promise<number>
  /** Sign-out: the presented token's session ends, and its `jti` is revoked whatever it was. */
  signOut: (userId: string, current: PresentedToken, client: Client) => Promise<void>
  /**
   * A step-up of the presented token's session with `method`, now (a token without a session
   * first becomes one, `external`, and stays the same token); its time. 401 when that session
   * has ended meanwhile. No other session of the user is touched. In the caller's transaction `tx`, when given.
   */
  stepUp: (userId: string, current: PresentedToken, method: AuthMethod, client: Client, tx?: Kysely<Database>) => Promise<Date>
  /** A failed sign-in on an existing account (its password by default; a second factor's code), counted per day; never fails the caller. */
  failedSignIn: (userId: string, client: Client, method?: AuthMethod) => void
  /** The last 90 days of events, newest first, after the event `before`; `more` when another page follows. */
  events: (userId: string, page: { limit: number, before?: string }) => Promise<{ events: SecurityEventRow[], more: boolean }>
}

export interface SessionDependencies {
  db: Kysely<Database>
  /** Where a failure of background bookkeeping is reported. */
  warn: (err: unknown, message: string) => void
}

/**
 * The presented token as a session of its own, when it has none (a token signed elsewhere): an
 * `external` session, authenticated at its `iat`, that lives as long as it. 401 when its `jti`
 * is another user's session id (it cannot become a session).
 */
export async function adoptToken (tx: Kysely<Database>, userId: string, token: PresentedToken, client: Client): Promise<void> {
  if (token.hasSession) return
  const adopted = await createSession(tx, {
    id: token.jti,
    userId,
    method: 'external',
    methods: ['external'],
    authenticatedAt: new Date(token.iat * 1000),
    ...recordedClient(client),
    expiresAt: new Date(token.exp * 1000 + 60_000)
  })
  if (!adopted) throw new UnauthorizedError()
}

export function sessionService ({ db, warn }: SessionDependencies): Sessions {
  return {
    async start (session, outer) {
      const start = async (tx: Kysely<Database>): Promise<boolean> => {
        if (session.password !== undefined && !await holdUserWithPassword(tx, session.userId, session.password)) return false
        await createSession(tx, {
          id: session.id,
          userId: session.userId,
          method: session.method,
          methods: session.methods,
          authenticatedAt: session.authenticatedAt,
          provider: session.provider,
          ...recordedClient(session.client),
          expiresAt: session.expiresAt
        })
        await recordSecurityEvent(tx, { userId: session.userId, type: 'sign-in', method: session.method, provider: session.provider, ...recordedClient(session.client) })
        return true
      }
      return outer === undefined ? db.transaction().execute(start) : start(outer)
    },

    list: (userId) => listLiveSessions(db, userId, MAX_LISTED_SESSIONS),

    async end (userId, id, client) {
      const ended = await db.transaction().execute(async (tx) => {
        if (!await endSession(tx, userId, id)) return false
        await recordSecurityEvent(tx, { userId, type: 'session-ended', ...recordedClient(client) })
        return true
      })
      if (!ended) throw new SessionNotFoundError()
    },

    endOthers (userId, current, client) {
      return db.transaction().execute(async (tx) => {
        // The caller's own token survives as a session (its jti another user's session id: 401, it would not survive).
        await adoptToken(tx, userId, current, client)
        const ended = await endSignIns(tx, userId, current.jti)
        await endOtherTokens(tx, userId, new Date())
        await recordSecurityEvent(tx, { userId, type: 'other-sessions-ended', ...recordedClient(client) })
        return ended
      })
    },

    async signOut (userId, current, client) {
      await db.transaction().execute(async (tx) => {
        await revokeToken(tx, { jti: current.jti, userId, expiresAt: new Date(current.exp * 1000) })
        if (current.hasSession && await endSession(tx, userId, current.jti)) {
          await recordSecurityEvent(tx, { userId, type: 'signed-out', ...recordedClient(client) })
        }
      })
    },

    stepUp (userId, current, method, client, outer) {
      const at = new Date()
      const stepUp = async (tx: Kysely<Database>): Promise<Date> => {
        await adoptToken(tx, userId, current, client)
        if (!await recordStepUp(tx, userId, current.jti, at, method)) throw new UnauthorizedError()
        await recordSecurityEvent(tx, { userId, type: 'stepped-up', method, ...recordedClient(client) })
        return at
      }
      return outer === undefined ? db.transaction().execute(stepUp) : stepUp(outer)
    },

    failedSignIn (userId, client, method = 'password') {
      recordFailedSignIn(db, { userId, method, ...recordedClient(client) })
        .catch((err: unknown) => warn(err, 'recording a failed sign-in failed'))
    },

    async events (userId, page) {
      const rows = await listSecurityEvents(db, userId, page)
      return { events: rows.slice(0, page.limit), more: rows.length > page.limit }
    }
  }
}
