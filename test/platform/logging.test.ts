// An error's log line stays bounded whatever the input (the production log lines of a
// real process, and their copy shipped to Axiom: test/integration/logging.test.ts).
import t from 'tap'
import { MAX_LOGGED_TEXT } from '../../errors.js'
import { serializeError } from '../../server-options.js'

t.test('an error\'s log line is bounded: clipped message and stack, no echoed fields', async (t) => {
  // What a database error looks like when a megabyte of input reaches it.
  const huge = 'x'.repeat(1_000_000)
  const err = Object.assign(new Error(`invalid input syntax for type timestamp with time zone: "${huge}"`), { code: '22007', detail: huge, where: huge })
  const line = JSON.stringify(serializeError(err))
  t.ok(line.length < 3 * MAX_LOGGED_TEXT, `${line.length} characters`)
  t.match(serializeError(err), { type: 'Error', code: '22007', message: /^invalid input syntax.*… \(1000058 characters\)$/ })
  t.notOk(line.includes('"detail"') || line.includes('"where"'), 'fields that repeat the input are left out')
  t.same(serializeError(new TypeError('short')).message, 'short', 'a short message is kept whole')
})
