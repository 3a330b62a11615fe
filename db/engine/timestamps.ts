// timestamptz columns are read as the ISO-8601 strings the API sends (2026-11-23T05:08:02.519Z),
// straight from PostgreSQL's text form (2026-11-23 05:08:02.519123+00): no Date is built
// and formatted back for each of the four timestamps of each task in a page. Sessions run
// in UTC with DateStyle ISO (SESSION_SETTINGS, run by db/engine/connect.ts on every new connection),
// so the fast path covers every value; any other offset, a year past 9999 or BC goes the long
// way through Date, with the same result. Fractions are truncated to milliseconds, as a Date
// would.
import type Pg from 'pg'
import pg from './pg.js'

export const TIMESTAMPTZ_OID = 1184

const parseToDate = pg.types.getTypeParser(TIMESTAMPTZ_OID) as (text: string) => Date | number

/** pg's `types` option: timestamptz as ISO strings, every other type as pg parses it. */
export const pgTypes = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
    oid === TIMESTAMPTZ_OID && format !== 'binary' ? timestamptzToIso : pg.types.getTypeParser(oid, format)) as typeof Pg.types.getTypeParser
}

/** PGlite's `parsers` option (its sessions are in UTC already). */
export const pgliteParsers = { [TIMESTAMPTZ_OID]: (text: string) => timestamptzToIso(text) }

/**
 * Run on every new connection: timestamps printed in UTC, in the ISO style both paths of
 * timestamptzToIso read, whatever the server's or the URL's defaults.
 */
export const SESSION_SETTINGS = "set time zone 'UTC'; set datestyle to 'ISO'"

export function timestamptzToIso (text: string): string {
  const end = text.length - 3
  // YYYY-MM-DD HH:MM:SS[.f…]+00
  if (end >= 19 && text.charCodeAt(4) === 45 && text.charCodeAt(10) === 32 && text.charCodeAt(end) === 43 &&
      text.charCodeAt(end + 1) === 48 && text.charCodeAt(end + 2) === 48) {
    const date = text.slice(0, 10)
    const time = text.slice(11, 19)
    if (end === 19) return `${date}T${time}.000Z`
    if (text.charCodeAt(19) === 46 && end > 20) return `${date}T${time}.${text.slice(20, Math.min(23, end)).padEnd(3, '0')}Z`
  }
  const parsed = parseToDate(text)
  // ±infinity have no ISO form; nothing we store is infinite, but answer rather than throw.
  return parsed instanceof Date && !Number.isNaN(parsed.getTime()) ? parsed.toISOString() : text
}
