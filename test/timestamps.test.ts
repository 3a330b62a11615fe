// timestamptz text → ISO-8601 (db/timestamps.ts): the same string a Date would give, for
// every form PostgreSQL prints; and the database layer hands out those strings.
import fc from 'fast-check'
import t from 'tap'
import { timestamptzToIso } from '../db/timestamps.js'

const pad = (n: number, width: number) => String(n).padStart(width, '0')

/** How PostgreSQL prints a timestamptz in UTC with DateStyle ISO: trailing zeros of the fraction dropped. */
function postgresText (date: Date, micros: number): string {
  const d = date
  const base = `${pad(d.getUTCFullYear(), 4)}-${pad(d.getUTCMonth() + 1, 2)}-${pad(d.getUTCDate(), 2)} ` +
    `${pad(d.getUTCHours(), 2)}:${pad(d.getUTCMinutes(), 2)}:${pad(d.getUTCSeconds(), 2)}`
  const fraction = (pad(d.getUTCMilliseconds(), 3) + pad(micros, 3)).replace(/0+$/, '')
  return `${base}${fraction === '' ? '' : `.${fraction}`}+00`
}

t.test('every UTC timestamp of years 1–9999, at any precision, reads as Date#toISOString()', async (t) => {
  fc.assert(fc.property(
    fc.date({ min: new Date('0001-01-01T00:00:00Z'), max: new Date('9999-12-31T23:59:59.999Z'), noInvalidDate: true }),
    fc.integer({ min: 0, max: 999 }),
    (date, micros) => timestamptzToIso(postgresText(date, micros)) === date.toISOString()
  ), { numRuns: 5000 })
})

t.test('the forms off the fast path', async (t) => {
  t.equal(timestamptzToIso('2026-11-23 05:08:02+00'), '2026-11-23T05:08:02.000Z', 'whole seconds')
  t.equal(timestamptzToIso('2026-11-23 05:08:02.5+00'), '2026-11-23T05:08:02.500Z', 'one digit')
  t.equal(timestamptzToIso('2026-11-23 06:08:02.519+01'), '2026-11-23T05:08:02.519Z', 'another offset')
  t.equal(timestamptzToIso('2026-11-23 10:38:02.519123+05:30'), '2026-11-23T05:08:02.519Z', 'an offset with minutes')
  t.equal(timestamptzToIso('20000-01-01 00:00:00+00'), new Date(Date.UTC(20000, 0, 1)).toISOString(), 'a five-digit year')
  t.equal(timestamptzToIso('infinity'), 'infinity', 'infinity is passed through rather than thrown on')
})
