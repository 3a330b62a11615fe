// timestamptz text → ISO-8601 (db/engine/timestamps.ts): the same string a Date would give, for
// every form PostgreSQL prints in the ISO style. (test/platform/db.test.ts reads timestamps through
// each database.)
import fc from 'fast-check'
import t from 'tap'
import { timestamptzToIso } from '../../db/engine/timestamps.js'

const pad = (n: number, width: number) => String(Math.abs(n)).padStart(width, '0')

/**
 * How PostgreSQL prints a timestamptz with DateStyle ISO in a zone `offsetMinutes` east of
 * UTC: the local time, trailing zeros of the fraction dropped, the offset as ±HH[:MM].
 */
function postgresText (date: Date, micros: number, offsetMinutes = 0): string {
  const local = new Date(date.getTime() + offsetMinutes * 60_000)
  const base = `${pad(local.getUTCFullYear(), 4)}-${pad(local.getUTCMonth() + 1, 2)}-${pad(local.getUTCDate(), 2)} ` +
    `${pad(local.getUTCHours(), 2)}:${pad(local.getUTCMinutes(), 2)}:${pad(local.getUTCSeconds(), 2)}`
  const fraction = (pad(local.getUTCMilliseconds(), 3) + pad(micros, 3)).replace(/0+$/, '')
  const sign = offsetMinutes < 0 ? '-' : '+'
  const minutes = Math.abs(offsetMinutes) % 60
  const zone = `${sign}${pad(Math.trunc(Math.abs(offsetMinutes) / 60), 2)}${minutes === 0 ? '' : `:${pad(minutes, 2)}`}`
  return `${base}${fraction === '' ? '' : `.${fraction}`}${zone}`
}

const dates = fc.date({ min: new Date('0001-01-02T00:00:00Z'), max: new Date('9999-12-30T23:59:59.999Z'), noInvalidDate: true })

t.test('UTC, years 1–9999, any precision (the fast path): Date#toISOString()', async (t) => {
  fc.assert(fc.property(dates, fc.integer({ min: 0, max: 999 }),
    (date, micros) => timestamptzToIso(postgresText(date, micros)) === date.toISOString()
  ), { numRuns: 5000 })
  t.equal(timestamptzToIso('2026-11-23 05:08:02+00'), '2026-11-23T05:08:02.000Z', 'whole seconds')
  t.equal(timestamptzToIso('2026-11-23 05:08:02.5+00'), '2026-11-23T05:08:02.500Z', 'one digit')
  t.equal(timestamptzToIso('2026-11-23 05:08:02.519999+00'), '2026-11-23T05:08:02.519Z', 'truncated, not rounded, as a Date does')
})

t.test('any other offset (the long way): the same instant', async (t) => {
  fc.assert(fc.property(dates, fc.integer({ min: 0, max: 999 }), fc.integer({ min: -12 * 60, max: 14 * 60 }).filter((m) => m !== 0),
    (date, micros, offset) => timestamptzToIso(postgresText(date, micros, offset)) === date.toISOString()
  ), { numRuns: 2000 })
  t.equal(timestamptzToIso('2026-11-23 10:38:02.519123+05:30'), '2026-11-23T05:08:02.519Z')
  t.equal(timestamptzToIso('2026-11-22 21:08:02.519-08'), '2026-11-23T05:08:02.519Z')
})

t.test('years outside 1–9999, BC and infinities', async (t) => {
  t.equal(timestamptzToIso('20000-01-01 00:00:00+00'), new Date(Date.UTC(20000, 0, 1)).toISOString(), 'a five-digit year')
  const bc = new Date(Date.UTC(0, 0, 1))
  bc.setUTCFullYear(-43, 2, 15) // 44 BC is year -43
  t.equal(timestamptzToIso('0044-03-15 00:00:00+00 BC'), bc.toISOString(), '44 BC')
  t.equal(timestamptzToIso('infinity'), 'infinity', 'infinity is passed through rather than thrown on')
  t.equal(timestamptzToIso('-infinity'), '-infinity')
})
