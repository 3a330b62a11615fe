// Ids and times as Stripe writes them: random ids with Stripe's prefixes and lengths, unix
// seconds. Shared by the stand-in and the webhook events (test/support/stripe-events.ts).
import { randomBytes } from 'node:crypto'

const ALNUM = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'

export const DAY = 86_400
/** The length of a monthly period the stand-in bills (and the events assume). */
export const PERIOD = 30 * DAY

/** Now, in unix seconds. */
export const now = (): number => Math.floor(Date.now() / 1000)

export function randomChars (length: number): string {
  let out = ''
  for (const byte of randomBytes(length)) out += ALNUM[byte % ALNUM.length]
  return out
}

/** Ids shaped like Stripe's: `cus_` + 14, `sub_1` + 23, `cs_test_a1` + 56, ... */
export const ids = {
  customer: () => `cus_${randomChars(14)}`,
  checkoutSession: () => `cs_test_a1${randomChars(56)}`,
  portalSession: () => `bps_1${randomChars(23)}`,
  portalConfiguration: () => `bpc_1${randomChars(23)}`,
  subscription: () => `sub_1${randomChars(23)}`,
  subscriptionItem: () => `si_${randomChars(14)}`,
  invoice: () => `in_1${randomChars(23)}`,
  invoiceLine: () => `il_1${randomChars(23)}`,
  paymentMethod: () => `pm_1${randomChars(23)}`,
  event: () => `evt_1${randomChars(23)}`,
  request: () => `req_${randomChars(14)}`
}
