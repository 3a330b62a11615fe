// Credential holders kept by the embedded database's one process (issue 30; issue 34 for API
// keys), so a request with a session token or an API key whose holder did not change costs the
// database thread no query for it. The database says what changed: a notice with the user's id on
// every change to a row the check reads (users, sessions, revoked_tokens:
// db/migrations/2026-11-29T00-00-00_token-holder-notices.ts; api_keys:
// db/migrations/2026-11-30T00-00-00_api-key-holder-notices.ts), heard before the answer to the
// query that committed it (db/engine/connect.ts, listen). So a sign-out, a revocation, a password
// change, a revoked or rotated key or a deleted account is refused from the next request on, as
// when every request read the holder. Only where one process is all there is: a fleet on a
// PostgreSQL server reads the holder with each request, for another instance's change would
// reach this one later than its answer reaches the user.
//
// What is kept is the holder row as read (db/users.ts, TokenHolder; db/api-keys.ts,
// KeyHolderRow), never a verdict: every request checks it again (accounts/credentials.ts,
// checkTokenHolder). What ends by the clock with no change to any row (an API key's expiry, the
// end of a rotated key's grace) is the `livesUntil` of the holder, worked out as it is kept and
// checked at each read. No absence is kept. A read that was under way while a change was heard
// keeps nothing, as it may have read the row before the change.
import type { TokenHolder } from '../db/users.js'

/** Holders kept at most (a bounded map: the oldest go first). */
const MAX_KEPT = 10_000
/** Nor longer than this, whatever was heard. */
const MAX_AGE_MS = 60_000

export interface HolderCache<H = TokenHolder> {
  /** The holder of the user's credential `id` (a token's `jti`, a key's hash) as last read, if kept, nothing of the user's changed since and its time not out. */
  get: (userId: string, id: string) => H | undefined
  /** Taken before a read of a holder: keep() keeps what it read only if nothing was heard since. */
  ticket: () => number
  /** Keeps what a read begun at `ticket` found (nothing for no holder). */
  keep: (ticket: number, userId: string, id: string, holder: H | undefined) => void
  /** A notice: a row of the user's changed ('': every user's). */
  changed: (userId: string) => void
}

/** `until`: the holder's own end by the clock (livesUntil), worked out once as it is kept. */
interface Kept<H> { holder: H, at: number, until: number }

/** `livesUntil`: when a holder stops holding by the clock alone (epoch ms; Infinity: never). */
export function holderCache<H = TokenHolder> (livesUntil: (holder: H) => number = () => Infinity): HolderCache<H> {
  // By user, then by credential: a notice names only the user.
  const byUser = new Map<string, Map<string, Kept<H>>>()
  let size = 0
  let heard = 0

  const forget = (userId: string) => {
    const tokens = byUser.get(userId)
    if (tokens === undefined) return
    size -= tokens.size
    byUser.delete(userId)
  }

  return {
    get (userId, id) {
      const tokens = byUser.get(userId)
      const kept = tokens?.get(id)
      if (kept === undefined) return undefined
      const now = Date.now()
      if (now - kept.at < MAX_AGE_MS && now < kept.until) return kept.holder
      tokens!.delete(id)
      size--
      // No empty map left behind: the bound's eviction takes users, and would free nothing.
      if (tokens!.size === 0) byUser.delete(userId)
      return undefined
    },
    ticket: () => heard,
    keep (ticket, userId, id, holder) {
      if (ticket !== heard || holder === undefined) return
      // Full: the user kept longest goes (a map keeps its insertion order).
      if (size >= MAX_KEPT) forget(byUser.keys().next().value!)
      let tokens = byUser.get(userId)
      if (tokens === undefined) byUser.set(userId, tokens = new Map())
      if (!tokens.has(id)) size++
      tokens.set(id, { holder, at: Date.now(), until: livesUntil(holder) })
    },
    changed (userId) {
      heard++
      if (userId !== '') {
        forget(userId)
        return
      }
      byUser.clear()
      size = 0
    }
  }
}
