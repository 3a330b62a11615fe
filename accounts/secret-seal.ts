// Secrets the service must read back (a TOTP seed: auth-extensions §3) are kept sealed with
// AES-256-GCM under MFA_ENCRYPTION_KEY, so a copy of the database alone cannot mint codes.
// Each sealed value names the key that sealed it (the first 8 hex digits of the key's SHA-256,
// nothing of the key itself) and is bound to its context (e.g. the user it belongs to): a
// value copied to another user's row, or tampered with, does not open. After a rotation the
// previous key (MFA_ENCRYPTION_KEY_PREVIOUS) still opens what it sealed, and says so: the
// caller seals it again under the current key when it next uses it.
//
//   v1.<key id>.<iv, base64url>.<ciphertext and tag, base64url>
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto'

const VERSION = 'v1'
const KEY_BYTES = 32
const IV_BYTES = 12
const TAG_BYTES = 16

/** A key that is not 32 bytes of base64, base64url or hex: refused when the configuration is read. */
export class SealKeyError extends Error {
  override name = 'SealKeyError'
}

/** A sealed value that does not open: not ours, tampered with, another context, or under a key no longer configured. */
export class SealOpenError extends Error {
  override name = 'SealOpenError'
}

/** Reads a 256-bit key written as 64 hex digits or as base64/base64url (43–44 characters). */
export function parseSealKey (text: string, name = 'MFA_ENCRYPTION_KEY'): Buffer {
  const value = text.trim()
  let key: Buffer | undefined
  if (/^[0-9a-fA-F]{64}$/.test(value)) key = Buffer.from(value, 'hex')
  else if (/^[A-Za-z0-9+/_-]{43}={0,1}$/.test(value)) key = Buffer.from(value, 'base64')
  if (key === undefined || key.length !== KEY_BYTES) {
    throw new SealKeyError(`${name} must be 32 random bytes, as 64 hex digits or in base64 (e.g. openssl rand -base64 32)`)
  }
  return key
}

const keyId = (key: Buffer): string => createHash('sha256').update(key).digest('hex').slice(0, 8)

export interface Sealer {
  /** Seals `plain` for `context` (what it belongs to, e.g. `totp:<user id>`) under the current key. */
  seal: (plain: string, context: string) => string
  /**
   * Opens what `seal` made for the same context. `stale`: sealed under the previous key, to be
   * sealed again under the current one. Throws SealOpenError when it does not open.
   */
  open: (sealed: string, context: string) => { plain: string, stale: boolean }
}

export function createSealer (keys: { current: Buffer, previous?: Buffer }): Sealer {
  const current = { id: keyId(keys.current), key: keys.current }
  const byId = new Map([[current.id, current.key]])
  if (keys.previous !== undefined) byId.set(keyId(keys.previous), keys.previous)
  return {
    seal (plain, context) {
      const iv = randomBytes(IV_BYTES)
      const cipher = createCipheriv('aes-256-gcm', current.key, iv)
      cipher.setAAD(Buffer.from(context, 'utf8'))
      const body = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final(), cipher.getAuthTag()])
      return [VERSION, current.id, iv.toString('base64url'), body.toString('base64url')].join('.')
    },
    open (sealed, context) {
      const [version, id, ivText, bodyText, ...rest] = sealed.split('.')
      if (version !== VERSION || id === undefined || ivText === undefined || bodyText === undefined || rest.length > 0) {
        throw new SealOpenError('not a sealed value')
      }
      const key = byId.get(id)
      if (key === undefined) throw new SealOpenError(`sealed under key ${id}, which is neither MFA_ENCRYPTION_KEY nor MFA_ENCRYPTION_KEY_PREVIOUS`)
      const iv = Buffer.from(ivText, 'base64url')
      const body = Buffer.from(bodyText, 'base64url')
      if (iv.length !== IV_BYTES || body.length < TAG_BYTES) throw new SealOpenError('not a sealed value')
      try {
        const decipher = createDecipheriv('aes-256-gcm', key, iv)
        decipher.setAAD(Buffer.from(context, 'utf8'))
        decipher.setAuthTag(body.subarray(body.length - TAG_BYTES))
        const plain = Buffer.concat([decipher.update(body.subarray(0, body.length - TAG_BYTES)), decipher.final()]).toString('utf8')
        return { plain, stale: id !== current.id }
      } catch {
        throw new SealOpenError('does not open: tampered with, or sealed for another context')
      }
    }
  }
}
