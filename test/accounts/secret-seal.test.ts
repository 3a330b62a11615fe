// TOTP seeds at rest (accounts/secret-seal.ts, auth-extensions §3): sealed with AES-256-GCM,
// bound to what they belong to, opened after a key rotation and marked for sealing again.
import { randomBytes } from 'node:crypto'
import t from 'tap'
import { createSealer, parseSealKey, SealKeyError, SealOpenError } from '../../accounts/secret-seal.js'

const SEED = 'JBSWY3DPEHPK3PXP'

t.test('a sealed seed opens for its own context only, and holds nothing of the seed or the key in the clear', async (t) => {
  const key = randomBytes(32)
  const sealer = createSealer({ current: key })
  const sealed = sealer.seal(SEED, 'totp:user-a')
  t.match(sealed, /^v1\.[0-9a-f]{8}\.[\w-]{16}\.[\w-]+$/)
  t.notOk(sealed.includes(SEED), 'not the seed')
  t.notOk(sealed.includes(key.toString('base64url')) || sealed.includes(key.toString('hex')), 'not the key')
  t.same(sealer.open(sealed, 'totp:user-a'), { plain: SEED, stale: false })
  t.throws(() => sealer.open(sealed, 'totp:user-b'), SealOpenError, 'copied to another user\'s row: does not open')
  t.not(sealer.seal(SEED, 'totp:user-a'), sealed, 'a fresh IV each time: the same seed never seals the same twice')
})

t.test('a value tampered with, truncated or not ours does not open', async (t) => {
  const sealer = createSealer({ current: randomBytes(32) })
  const sealed = sealer.seal(SEED, 'ctx')
  const [v, id, iv, body] = sealed.split('.') as [string, string, string, string]
  const flipped = Buffer.from(body, 'base64url')
  flipped[0] = flipped[0]! ^ 1
  for (const [what, value] of [
    ['a ciphertext bit flipped', [v, id, iv, flipped.toString('base64url')].join('.')],
    ['the tag cut off', [v, id, iv, Buffer.from(body, 'base64url').subarray(0, 10).toString('base64url')].join('.')],
    ['another IV', [v, id, randomBytes(12).toString('base64url'), body].join('.')],
    ['another version', ['v2', id, iv, body].join('.')],
    ['an extra part', `${sealed}.x`],
    ['the bare seed', SEED],
    ['empty', '']
  ] as const) {
    t.throws(() => sealer.open(value, 'ctx'), SealOpenError, what)
  }
  t.throws(() => createSealer({ current: randomBytes(32) }).open(sealed, 'ctx'), SealOpenError, 'another key entirely')
})

t.test('after a rotation the previous key still opens what it sealed, marked stale; once sealed again it is current', async (t) => {
  const oldKey = randomBytes(32)
  const newKey = randomBytes(32)
  const before = createSealer({ current: oldKey }).seal(SEED, 'totp:u')
  const rotated = createSealer({ current: newKey, previous: oldKey })
  const opened = rotated.open(before, 'totp:u')
  t.same(opened, { plain: SEED, stale: true })
  const again = rotated.seal(opened.plain, 'totp:u')
  t.same(rotated.open(again, 'totp:u'), { plain: SEED, stale: false })
  t.throws(() => createSealer({ current: newKey }).open(before, 'totp:u'), SealOpenError, 'once the previous key is dropped, what it alone sealed is refused, not misread')
})

t.test('a key must be 32 bytes, as 64 hex digits or base64', async (t) => {
  const key = randomBytes(32)
  t.same(parseSealKey(key.toString('hex')), key, 'hex')
  t.same(parseSealKey(key.toString('base64')), key, 'base64 (openssl rand -base64 32)')
  t.same(parseSealKey(key.toString('base64url')), key, 'base64url')
  t.same(parseSealKey(` ${key.toString('base64')}\n`), key, 'blanks around it trimmed')
  for (const [what, text] of [
    ['31 bytes', randomBytes(31).toString('base64')],
    ['33 bytes', randomBytes(33).toString('hex')],
    ['a passphrase', 'correct horse battery staple'],
    ['empty', ''],
    ['63 hex digits', key.toString('hex').slice(1)]
  ] as const) {
    t.throws(() => parseSealKey(text), SealKeyError, what)
  }
  const err = t.throws(() => parseSealKey('x'.repeat(10), 'MFA_ENCRYPTION_KEY_PREVIOUS')) as Error
  t.match(err.message, /^MFA_ENCRYPTION_KEY_PREVIOUS must be 32 random bytes/, 'the message names the setting')
  t.notOk(err.message.includes('xxxxxxxxxx'), 'and never repeats the value')
})
