// Who a client is, for every limit that counts per client: the rate limits, the sign-in
// limits and the share of connections (server-options.ts). Behind trusted proxies the
// address is the right-most X-Forwarded-For entry they did not write (config.ts,
// TRUST_PROXY); an IPv6 client is counted by its /64, the block one subscriber gets, so
// the 2^64 addresses of one home network are one client and not 2^64 fresh ones.
// Also the facts about a request's client that routes hand to the accounts wing (clientOf).
import { isIPv4, isIPv6 } from 'node:net'
import type { FastifyRequest } from 'fastify'

/** The cookie a device that signed in holds (set by plugins/app/sign-in-limits.ts, read here). */
export const DEVICE_COOKIE = 'sign_in_device'

/** Who makes a request, as far as the limits and the session records care. */
export interface Client {
  /** The client's address (request.ip): counted by clientKey(). */
  address: string | undefined
  /** The value of the `sign_in_device` cookie it presented, if any. */
  deviceCookie: string | undefined
  /** Its User-Agent header, cut to 512 characters: recorded with sessions and security events. */
  userAgent?: string
}

/** The facts about a request's client that the limits read. */
export const clientOf = (request: FastifyRequest): Client => ({
  address: request.ip,
  deviceCookie: request.cookies[DEVICE_COOKIE],
  userAgent: request.headers['user-agent']?.slice(0, 512)
})

/** The eight 16-bit groups of an IPv6 address, or undefined when it is not one. */
function ipv6Groups (address: string): number[] | undefined {
  if (!isIPv6(address)) return undefined
  let text = address.replace(/%.*$/, '')
  // An IPv4 tail (::ffff:192.0.2.1) is two groups.
  const v4 = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text)
  if (v4 !== null) {
    const [a, b, c, d] = v4.slice(1).map(Number) as [number, number, number, number]
    text = `${text.slice(0, v4.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`
  }
  const [head = '', tail] = text.split('::')
  const parse = (part: string) => part === '' ? [] : part.split(':').map((group) => Number.parseInt(group, 16))
  const first = parse(head)
  const last = tail === undefined ? [] : parse(tail)
  return [...first, ...new Array<number>(8 - first.length - last.length).fill(0), ...last]
}

/**
 * The key a client's address is counted under: an IPv4 address as it is (also when written
 * as an IPv4-mapped IPv6 address), an IPv6 address as its /64 prefix; anything else as given.
 */
export function clientKey (address: string | undefined): string {
  if (address === undefined) return 'unknown'
  if (isIPv4(address)) return address
  const groups = ipv6Groups(address)
  if (groups === undefined) return address
  const isMapped = groups.slice(0, 5).every((group) => group === 0) && groups[5] === 0xffff
  if (isMapped) return [groups[6]! >> 8, groups[6]! & 0xff, groups[7]! >> 8, groups[7]! & 0xff].join('.')
  return `${groups.slice(0, 4).map((group) => group.toString(16)).join(':')}::/64`
}
