// Personal API keys (auth-extensions §5, docs/api-keys.md): for scripts and OpenAPI consumers,
// which would otherwise keep a 7-day browser token. A key is `tsk_`, 43 base62 characters
// (256 random bits) and 6 of a CRC32 of what precedes them, so a secret scanner recognises it
// and a typo or a forged key is refused before any query. Only its SHA-256 is kept (256 random
// bits need no salt nor slow hash); it is shown once. It may do only what its scopes say, on
// the routes that name scopes (the route flags of plugins/app/authenticate.ts). Creating and
// rotating one need a recent sign-in (the step-up of §6, a route flag). Its owner, a password
// reset, the account's deletion, or whoever finds it leaked (POST /api-keys/revoke) end it.
// No Fastify here: the per-key limit's counters are a port (Counters, accounts/limits.ts).
import { randomBytes, randomUUID } from 'node:crypto'
import { crc32 } from 'node:zlib'
import type { Kysely } from 'kysely'
import type { Client } from '../client-address.js'
import {
  countActiveApiKeys, insertApiKey, listLiveApiKeys, revokeApiKey, revokeApiKeysByHash, revokeApiKeysOfUser, touchApiKey, userForApiKey,
  type KeyAsk, type KeyHolderRow
} from '../db/api-keys.js'
import { recordSecurityEvent } from '../db/security-events.js'
import type { ApiKeyRow, Database, UserRow } from '../db/types.js'
import { findUserById, lockUser, userOfHolder } from '../db/users.js'
import { ApiKeyLimitReachedError, ApiKeyNotFoundError, rateLimited, UnauthorizedError, ValidationError } from '../errors.js'
import { API_KEY_LENGTH, API_KEY_SCOPES, type ApiKeyScope } from '../schemas/api-keys.js'
import { hashToken } from '../token-hash.js'
import type { CredentialReader, Principal } from './credentials.js'
import type { ApiKeyEvent } from '../mail/messages.js'
import type { AccountEmail, AccountMail } from './mail.js'
import { recordedClient, type Counters, type SignInLimits } from './limits.js'

/** At most this many live keys per account (a rotation's outgoing key not counted). */
export const MAX_LIVE_KEYS = 20
/** A key expires at most a year after it is made. */
export const MAX_KEY_LIFETIME_MS = 366 * 24 * 60 * 60 * 1000

const KEY_PREFIX = 'tsk_'
const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'
const BODY_LENGTH = 43
const CHECKSUM_LENGTH = 6
const KEY_SHAPE = new RegExp(`^${KEY_PREFIX}[0-9A-Za-z]{${BODY_LENGTH + CHECKSUM_LENGTH}}$`)
/** What a list shows of a key: the first 8 characters after `tsk_`. */
const PREFIX_LENGTH = 8

/** `value` in base62, zero-padded (the alphabet's first character) to `width`: the key's random part. */
function base62 (value: bigint, width: number): string {
  let text = ''
  for (let rest = value; rest > 0n; rest /= 62n) text = ALPHABET[Number(rest % 62n)]! + text
  return text.padStart(width, ALPHABET[0])
}

/** The checksum: CRC32 (below 2^32, so plain numbers suffice: this runs on every request with a key). */
function checksumOf (head: string): string {
  let text = ''
  for (let rest = crc32(head); rest > 0; rest = Math.floor(rest / 62)) text = ALPHABET[rest % 62]! + text
  return text.padStart(CHECKSUM_LENGTH, ALPHABET[0])
}

/** A new key: 256 random bits, then the checksum of everything before it. */
export function newApiKey (): string {
  const head = KEY_PREFIX + base62(BigInt('0x' + randomBytes(32).toString('hex')), BODY_LENGTH)
  return head + checksumOf(head)
}

/** Whether `key` has a key's form and its checksum holds: what is checked before any query. */
export function isWellFormedApiKey (key: string): boolean {
  if (key.length !== API_KEY_LENGTH || !KEY_SHAPE.test(key)) return false
  const head = key.slice(0, -CHECKSUM_LENGTH)
  return checksumOf(head) === key.slice(-CHECKSUM_LENGTH)
}

export const isApiKeyShaped = (credential: string): boolean => credential.startsWith(KEY_PREFIX)

const prefixOf = (key: string): string => key.slice(KEY_PREFIX.length, KEY_PREFIX.length + PREFIX_LENGTH)

/** A key as lists show it: never the key, never its hash. */
export interface ApiKeyView {
  id: string
  name: string
  scopes: ApiKeyScope[]
  prefix: string
  createdAt: string
  expiresAt: string | null
  lastUsedAt: string | null
  lastUsedAddress: string | null
  /** A rotated key: when its grace ends (null for any other live key). */
  revokesAt: string | null
}

export const toApiKeyView = (row: ApiKeyRow): ApiKeyView => ({
  id: row.id,
  name: row.name,
  scopes: row.scopes.split(' ') as ApiKeyScope[],
  prefix: row.prefix,
  createdAt: row.created_at,
  expiresAt: row.expires_at,
  lastUsedAt: row.last_used_at,
  lastUsedAddress: row.last_used_address,
  revokesAt: row.revoked_at
})

/** A key just made: what lists show of it, and the key itself (shown this once). */
export interface MadeApiKey { view: ApiKeyView, key: string }

export interface NewApiKeyRequest { name: string, scopes: ApiKeyScope[], expiresAt?: string }

export interface ApiKeys {
  /** 409 API_KEY_LIMIT_REACHED past MAX_LIVE_KEYS; 400 for an expiry not ahead or past a year. */
  create: (client: Client, user: UserRow, request: NewApiKeyRequest) => Promise<MadeApiKey>
  list: (userId: string) => Promise<ApiKeyView[]>
  /** The owner ends it now (one in a rotation's grace too). 404 API_KEY_NOT_FOUND. */
  revoke: (client: Client, user: UserRow, id: string) => Promise<void>
  /** A new key with the same name, scopes and expiry; the old one works `graceSeconds` more. 404 API_KEY_NOT_FOUND. */
  rotate: (client: Client, user: UserRow, id: string, graceSeconds: number) => Promise<MadeApiKey>
  /**
   * Whoever found keys leaked ends them: each live one among `keys` stops, its owner is mailed
   * and an event recorded. Answers nothing, so it tells nothing of what the keys were.
   */
  revokeReported: (client: Client, keys: readonly string[]) => Promise<void>
}

export interface ApiKeyDependencies {
  db: Kysely<Database>
  mail: AccountMail
  limits: Pick<SignInLimits, 'admitMailRequest'>
}

export function apiKeyService ({ db, mail, limits }: ApiKeyDependencies): ApiKeys {
  const event = (tx: Kysely<Database>, client: Client, userId: string, type: string, method?: string) =>
    recordSecurityEvent(tx, { userId, type, method: method ?? null, ...recordedClient(client) })
  const notice = (user: UserRow, event: ApiKeyEvent, key: Pick<ApiKeyRow, 'name' | 'prefix'>): AccountEmail =>
    ({ kind: 'api-key', user, event, name: key.name, prefix: key.prefix })

  const insert = async (tx: Kysely<Database>, userId: string, fields: { name: string, scopes: string, expiresAt: string | null }): Promise<MadeApiKey> => {
    const key = newApiKey()
    const row = await insertApiKey(tx, {
      id: randomUUID(), user_id: userId, name: fields.name, prefix: prefixOf(key), key_hash: hashToken(key), scopes: fields.scopes, expires_at: fields.expiresAt
    })
    return { view: toApiKeyView(row), key }
  }

  return {
    async create (client, user, request) {
      let expiresAt: string | null = null
      if (request.expiresAt !== undefined) {
        const at = Date.parse(request.expiresAt)
        if (!(at > Date.now()) || at > Date.now() + MAX_KEY_LIFETIME_MS) throw new ValidationError(['must be ahead, and at most a year ahead - expiresAt'])
        expiresAt = new Date(at).toISOString()
      }
      const scopes = API_KEY_SCOPES.filter((scope) => request.scopes.includes(scope)).join(' ')
      return mail.transaction(async (tx) => {
        // One creation at a time per account, so two racing at 19 keys cannot make 21.
        await lockUser(tx, user.id)
        if (await countActiveApiKeys(tx, user.id) >= MAX_LIVE_KEYS) throw new ApiKeyLimitReachedError()
        const made = await insert(tx, user.id, { name: request.name, scopes, expiresAt })
        await event(tx, client, user.id, 'api-key-created')
        return { value: made, emails: [notice(user, 'created', made.view)] }
      })
    },

    async list (userId) {
      return (await listLiveApiKeys(db, userId)).map(toApiKeyView)
    },

    async revoke (client, user, id) {
      await mail.transaction(async (tx) => {
        const revoked = await revokeApiKey(tx, user.id, id, 'owner')
        if (revoked === undefined) throw new ApiKeyNotFoundError()
        await event(tx, client, user.id, 'api-key-revoked', 'owner')
        return { value: undefined, emails: [notice(user, 'revoked', revoked)] }
      })
    },

    async rotate (client, user, id, graceSeconds) {
      return mail.transaction(async (tx) => {
        // Its row as it winds down (name, scopes and expiry unchanged); none when it was rotated
        // once already, revoked, expired, or another user's.
        const old = await revokeApiKey(tx, user.id, id, 'rotated', graceSeconds)
        if (old === undefined) throw new ApiKeyNotFoundError()
        const made = await insert(tx, user.id, { name: old.name, scopes: old.scopes, expiresAt: old.expires_at })
        await event(tx, client, user.id, 'api-key-rotated')
        return { value: made, emails: [notice(user, 'rotated', old)] }
      })
    },

    async revokeReported (client, keys) {
      // Limited per client like the other requests that mail someone (429 past it).
      await limits.admitMailRequest(client)
      // A key that fails its checksum is no key: no query for it.
      const hashes = [...new Set(keys.filter(isWellFormedApiKey))].map(hashToken)
      if (hashes.length === 0) return
      await mail.transaction(async (tx) => {
        const revoked = await revokeApiKeysByHash(tx, hashes)
        const emails: AccountEmail[] = []
        for (const row of revoked) {
          await event(tx, client, row.user_id, 'api-key-reported')
          const owner = await findUserById(tx, row.user_id)
          if (owner !== undefined) emails.push(notice(owner, 'reported', row))
        }
        return { value: undefined, emails }
      })
    }
  }
}

/**
 * In a password reset's transaction (accounts/service.ts): every key of the account ends, for
 * the account may have been someone else's until now. A password change keeps them (its
 * holder knew the password). The notice it causes, if any key was live.
 */
export async function revokeKeysOnReset (tx: Kysely<Database>, client: Client, user: Pick<UserRow, 'id' | 'email'>): Promise<AccountEmail[]> {
  const revoked = await revokeApiKeysOfUser(tx, user.id, 'password-reset')
  // One event per key, as when its owner revokes it.
  for (let n = 0; n < revoked.length; n++) {
    await recordSecurityEvent(tx, { userId: user.id, type: 'api-key-revoked', method: 'password-reset', ...recordedClient(client) })
  }
  return revoked.length === 0 ? [] : [{ kind: 'api-key', user, event: 'revoked-by-reset', name: '', prefix: '', count: revoked.length }]
}

export interface ApiKeyReaderDependencies {
  db: Kysely<Database>
  /** Where the per-key counts live (Redis when configured, so every instance shares them). */
  counters: Counters
  /** Requests a key may make a minute (API_KEY_RATE_LIMIT_MAX; 0: no limit). */
  perMinute: number
}

/** `lastUsedAt` is written at most once a minute. */
const LAST_USED_RESOLUTION_MS = 60_000
const LIMIT_WINDOW_MS = 60_000
/** Keys whose owner and scopes this process keeps (the oldest seen go first). */
const MAX_KNOWN_KEYS = 10_000

/** The API key's reader, and its side of a route whose statement checks the key itself. */
export interface ApiKeyReader extends CredentialReader {
  /**
   * On a route whose statement reads the key's holder (`keyInStatement`,
   * plugins/app/authenticate.ts): what that statement asks, once this process has seen the key
   * live (its owner and scopes never change) and it holds the route's `scopes`, with its
   * per-minute count taken (429 past it, or 401 for a key that no longer lives). Undefined
   * otherwise: the hook reads the key as on every route. 401 for a malformed key.
   */
  ask: (key: string, scopes: readonly string[]) => Promise<KeyAsk | undefined>
  /** The principal of a key whose statement read its holder: 401 without a row (a key no longer live, forgotten then). */
  principalOf: (key: KeyAsk, holder: KeyHolderRow | undefined, client: () => Client) => Promise<Principal>
}

interface KnownKey { keyId: string, userId: string, scopes: ReadonlySet<string> }

/**
 * The API key: its checksum first (a typo or a forged key costs no query), then the user and
 * the key's scopes in one prepared query, then the key's own limit. Takes only what starts
 * with `tsk_`: put it before the session token's reader, which takes anything.
 *
 * What it keeps of the keys it has read live (their hash, id, owner and scopes, none of which
 * ever changes for a key) lets a route's own statement check one (`ask`): whether it still
 * lives is read there, with the route's data, on every request. A key never read live here is
 * never kept, so keys that do not exist cannot fill the map.
 */
export function apiKeyReader ({ db, counters, perMinute }: ApiKeyReaderDependencies): ApiKeyReader {
  const known = new Map<string, KnownKey>()
  const remember = (keyHash: string, key: KnownKey) => {
    if (known.has(keyHash)) return
    if (known.size >= MAX_KNOWN_KEYS) known.delete(known.keys().next().value!)
    known.set(keyHash, key)
  }
  const admit = async (keyId: string, keyHash: string, checkedLive: boolean) => {
    if (perMinute === 0) return
    const { count, ttlMs } = await counters.increment(`api-key:${keyId}`, LIMIT_WINDOW_MS)
    if (count <= perMinute) return
    // A key that no longer lives is refused as such (401), not as one over its limit.
    if (!checkedLive && (await userForApiKey.run(db, { keyHash })).length === 0) throw new UnauthorizedError()
    throw rateLimited(Math.max(1, Math.ceil(ttlMs / 1000)))
  }
  const scopesOf = (row: KeyHolderRow): ReadonlySet<string> => new Set(row.key_scopes.split(' '))
  const principalOf = async (row: KeyHolderRow, scopes: ReadonlySet<string>, clientOf: () => Client): Promise<Principal> => {
    const { key_id: keyId, key_last_used_at: lastUsedAt } = row
    if (lastUsedAt === null || Date.now() - Date.parse(lastUsedAt) >= LAST_USED_RESOLUTION_MS) {
      await touchApiKey(db, keyId, recordedClient(clientOf()).address)
    }
    return { user: userOfHolder(row), session: null, scopes, apiKeyId: keyId }
  }
  return {
    takes: isApiKeyShaped,
    async read (key, clientOf) {
      if (!isWellFormedApiKey(key)) throw new UnauthorizedError()
      const keyHash = hashToken(key)
      const [row] = await userForApiKey.run(db, { keyHash })
      if (row === undefined) throw new UnauthorizedError()
      const scopes = scopesOf(row)
      remember(keyHash, { keyId: row.key_id, userId: row.id, scopes })
      await admit(row.key_id, keyHash, true)
      return principalOf(row, scopes, clientOf)
    },
    async ask (key, scopes) {
      if (!isWellFormedApiKey(key)) throw new UnauthorizedError()
      const keyHash = hashToken(key)
      const seen = known.get(keyHash)
      if (seen === undefined || !scopes.every((scope) => seen.scopes.has(scope))) return undefined
      await admit(seen.keyId, keyHash, false)
      return { keyHash, userId: seen.userId }
    },
    async principalOf (ask, holder, clientOf) {
      if (holder === undefined) {
        // No longer live: forgotten, so its next request meets the hook's own read (one cheap query).
        known.delete(ask.keyHash)
        throw new UnauthorizedError()
      }
      // A key's scopes never change: the set kept when it was read (unless forgotten since).
      return principalOf(holder, known.get(ask.keyHash)?.scopes ?? scopesOf(holder), clientOf)
    }
  }
}
