// Limits on what checks a password or a one-time link, and on what mails one (OWASP's
// Authentication and Credential Stuffing cheat sheets; NIST SP 800-63B §5.2.2). One protocol,
// written here once: admit → attempt → failed or succeeded.
// - attempts per client (an IPv4 address, an IPv6 /64: client-address.ts), every attempt
//   counted, AUTH_RATE_LIMIT_MAX per RATE_LIMIT_WINDOW_MS, refused before any query or hash;
//   requests that mail a link are counted apart, so they never hold back a sign-in, and so are
//   the passkey ceremonies a client starts without an account (each stores a challenge);
// - failed checks per account, from every client together, with the same cap: past it the
//   account is locked for the rest of the window, so many clients guess no more than one
//   could. Its owner keeps access from the devices they signed in on: a successful check
//   gives a device cookie (OWASP's "device cookies": a signed nonce bound to the account)
//   that lets that device past the lock, until the device fails that many times itself. A
//   device that never signed in gets past it through an emailed link (POST /auth/device-link):
//   the owner's inbox, not the attacker, decides;
// - successful checks per account, with the same cap: whoever knows the password still cannot
//   run the account's password routes (and their notices) without bound;
// - mails per inbox: EMAIL_LINK_MAX_PER_HOUR of every kind the account routes send, after which
//   links are not sent (the request is answered as always) and notices wait for a digest.
// No Fastify here: the client is its address and the device cookie it presented (Client,
// client-address.ts); where the counts live (memory, Redis) is the caller's Counters
// (plugins/app/sign-in-limits.ts).
import { createHash, createHmac, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto'
import { clientKey, type Client } from '../client-address.js'
import { accountLocked, rateLimited } from '../errors.js'

/** The client as sessions and security events record it: address and User-Agent, bounded as their columns are. */
export const recordedClient = (client: Client): { address: string | null, userAgent: string | null } =>
  ({ address: client.address?.slice(0, 64) ?? null, userAgent: client.userAgent?.slice(0, 512) ?? null })

/** One admitted password or link check; it ends failed or succeeded (or in neither, when what follows the check fails). */
export interface Attempt {
  /**
   * The check failed: one more failure for the account and for the device (when the attempt
   * named an account; per client it was counted when admitted). Returns `error`, so a caller
   * writes `throw await attempt.failed(new SomeError())`.
   */
  failed: <E>(error: E) => Promise<E>
  /**
   * The check succeeded for `account`: counted for the account, and the device cookie that
   * lets this device past the account's lock (the one it holds, renewed).
   */
  succeeded: (account: string) => Promise<string>
}

/** What the hourly cap of an inbox says of one more mail to it. */
export interface InboxAdmission {
  /** Under the cap: send it now. Past it: a link is not sent, a notice waits for the digest. */
  allowed: boolean
  /** When the inbox's hour ends (ms from now): when a digest of what was held back is due. */
  windowEndsInMs: number
}

export interface SignInLimits {
  /**
   * Before a password or link check: counts the attempt from this client, and refuses (429)
   * a client past its limit; with `account` (an email), an account whose password was checked
   * successfully that often this window (429 RATE_LIMITED), and an attempt on a locked account
   * from a device that has not signed in to it (429 ACCOUNT_LOCKED: the device-link offers a way past).
   */
  admit: (client: Client, account?: string) => Promise<Attempt>
  /**
   * Before a request that mails (a link or a notice) whoever it concerns: counts it from this
   * client (429 past its limit, counted apart from sign-ins).
   */
  admitMailRequest: (client: Client) => Promise<void>
  /**
   * Before a passkey ceremony started without a session (sign-in options: each stores a
   * challenge): counts it from this client, apart from sign-ins and mail requests, with the
   * same cap (429 past it), so no one client fills the challenges' table.
   */
  admitCeremony: (client: Client) => Promise<void>
  /** One more mail to `inbox` this hour (every kind the account routes send counts). */
  admitInbox: (inbox: string) => Promise<InboxAdmission>
  /**
   * admitMailRequest, then admitInbox: whether a link may go to `inbox` (false: answer as
   * usual, send nothing). For links queued without knowing whether the inbox has an account.
   */
  admitLinkRequest: (client: Client, inbox: string) => Promise<boolean>
  /** A device cookie for `account` with a nonce of its own (its failures start at none): the emailed device link's. */
  trustDevice: (account: string) => string
}

/** Where the counts live: windows that start at a key's first count. */
export interface Counters {
  /** Adds one; the count and the milliseconds until the key's window ends. */
  increment: (key: string, windowMs: number) => Promise<{ count: number, ttlMs: number }>
  /** The count and the milliseconds until the key's window ends (0 and 0 when none). */
  get: (key: string) => Promise<{ count: number, ttlMs: number }>
}

const MAX_MEMORY_KEYS = 100_000

/** Counters of one process, bounded in number (the oldest window is dropped first). */
export function memoryCounters (): Counters {
  const counts = new Map<string, { count: number, endsAt: number }>()
  const live = (key: string) => {
    const entry = counts.get(key)
    if (entry === undefined || entry.endsAt > Date.now()) return entry
    counts.delete(key)
    return undefined
  }
  return {
    async increment (key, windowMs) {
      let entry = live(key)
      if (entry === undefined) {
        // A Map keeps insertion order: the oldest window goes first.
        if (counts.size >= MAX_MEMORY_KEYS) counts.delete(counts.keys().next().value!)
        entry = { count: 0, endsAt: Date.now() + windowMs }
        counts.set(key, entry)
      }
      entry.count++
      return { count: entry.count, ttlMs: entry.endsAt - Date.now() }
    },
    async get (key) {
      const entry = live(key)
      return entry === undefined ? { count: 0, ttlMs: 0 } : { count: entry.count, ttlMs: entry.endsAt - Date.now() }
    }
  }
}

/** The key device cookies are signed with: apart from the token key, though from the same secret. */
export const deviceKeyFrom = (secret: string): Buffer => Buffer.from(hkdfSync('sha256', secret, 'sign-in-device', 'device cookie', 32))

// Counters keyed by an email hold a digest, not the address: Redis keys are readable by its operators.
const digest = (email: string) => createHash('sha256').update(email).digest('base64url').slice(0, 22)
const HOUR_MS = 60 * 60_000

export interface LimitSettings {
  counters: Counters
  /** AUTH_RATE_LIMIT_MAX: attempts per client, and failures per account and per device, in a window; 0 turns these off. */
  max: number
  /** RATE_LIMIT_WINDOW_MS */
  windowMs: number
  /** EMAIL_LINK_MAX_PER_HOUR; 0 turns it off. */
  linksPerHour: number
  /** deviceKeyFrom(AUTH_JWT_SECRET) */
  deviceKey: Buffer
}

export function signInLimits ({ counters, max, windowMs, linksPerHour, deviceKey }: LimitSettings): SignInLimits {
  // One counter per thing counted; the key prefixes are those of the counts already stored (Redis).
  const counter = (prefix: string, ms: number) => ({
    add: (key: string) => counters.increment(`${prefix}:${key}`, ms),
    read: (key: string) => counters.get(`${prefix}:${key}`)
  })
  const attemptsPerClient = counter('attempts', windowMs)
  const failuresPerAccount = counter('failures', windowMs)
  const failuresPerDevice = counter('device-failures', windowMs)
  const successesPerAccount = counter('successes', windowMs)
  const linkRequestsPerClient = counter('mail-attempts', windowMs)
  const ceremoniesPerClient = counter('ceremonies', windowMs)
  const linksPerInbox = counter('mail-to', HOUR_MS)

  // Device cookies: `<nonce>.<HMAC(nonce, account)>`. Only a device that signed in to the
  // account holds one that checks.
  const deviceMac = (nonce: string, email: string) => createHmac('sha256', deviceKey).update(`${nonce}\n${email}`).digest()
  /** The nonce of the client's device cookie when it was issued for `email`. */
  const deviceOf = (client: Client, email: string): string | undefined => {
    const [nonce, mac, extra] = (client.deviceCookie ?? '').split('.')
    if (nonce === undefined || mac === undefined || extra !== undefined || !/^[\w-]{22}$/.test(nonce)) return undefined
    const given = Buffer.from(mac, 'base64url')
    const expected = deviceMac(nonce, email)
    return given.length === expected.length && timingSafeEqual(given, expected) ? nonce : undefined
  }

  const deviceCookie = (client: Client, email: string): string => {
    const nonce = deviceOf(client, email) ?? randomBytes(16).toString('base64url')
    return `${nonce}.${deviceMac(nonce, email).toString('base64url')}`
  }

  const attempt = (client: Client, account: string | undefined): Attempt => ({
    async failed (error) {
      if (max === 0 || account === undefined) return error
      await failuresPerAccount.add(digest(account))
      const device = deviceOf(client, account)
      if (device !== undefined) await failuresPerDevice.add(device)
      return error
    },
    async succeeded (email) {
      if (max > 0) await successesPerAccount.add(digest(email))
      return deviceCookie(client, email)
    }
  })

  const admitInbox = async (inbox: string): Promise<InboxAdmission> => {
    if (linksPerHour === 0) return { allowed: true, windowEndsInMs: 0 }
    const { count, ttlMs } = await linksPerInbox.add(digest(inbox))
    return { allowed: count <= linksPerHour, windowEndsInMs: ttlMs }
  }
  /** One more from this client on `perClient` (429 past the cap). */
  const admitFrom = async (perClient: ReturnType<typeof counter>, client: Client): Promise<void> => {
    if (max === 0) return
    const requests = await perClient.add(clientKey(client.address))
    if (requests.count > max) throw rateLimited(requests.ttlMs / 1000)
  }
  const admitMailRequest = (client: Client) => admitFrom(linkRequestsPerClient, client)

  return {
    async admit (client, account) {
      if (max === 0) return attempt(client, account)
      await admitFrom(attemptsPerClient, client)
      if (account === undefined) return attempt(client, account)
      const [failures, successes] = await Promise.all([failuresPerAccount.read(digest(account)), successesPerAccount.read(digest(account))])
      if (failures.count >= max) {
        const device = deviceOf(client, account)
        if (device === undefined || (await failuresPerDevice.read(device)).count >= max) throw accountLocked(failures.ttlMs / 1000)
      }
      if (successes.count >= max) throw rateLimited(successes.ttlMs / 1000)
      return attempt(client, account)
    },
    admitMailRequest,
    admitCeremony: (client) => admitFrom(ceremoniesPerClient, client),
    admitInbox,
    async admitLinkRequest (client, inbox) {
      await admitMailRequest(client)
      return (await admitInbox(inbox)).allowed
    },
    trustDevice: (email) => deviceCookie({ address: undefined, deviceCookie: undefined }, email)
  }
}
