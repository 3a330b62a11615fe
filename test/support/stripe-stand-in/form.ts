// Request parameters as Stripe reads them: form-encoded `a[b][0][c]=x` bodies into nested
// objects, booleans, optional strings and metadata, and unknown parameters refused.
import { ApiError, invalid } from './errors.js'

type Obj = Record<string, any>

const UNSAFE_KEYS = new Set(['__proto__', 'constructor', 'prototype'])

/**
 * Parses `a[b][0][c]=x` pairs into nested objects and arrays, as Stripe does. Numeric
 * (or empty) brackets make arrays; values stay strings.
 */
export function parseForm (pairs: Iterable<[string, string]>): Obj {
  const root: Obj = {}
  for (const [key, value] of pairs) {
    const match = /^([^[\]]+)((?:\[[^[\]]*\])*)$/.exec(key)
    const segments = match
      ? [match[1] as string, ...[...(match[2] ?? '').matchAll(/\[([^[\]]*)\]/g)].map((m) => m[1] as string)]
      : [key]
    if (segments.some((s) => UNSAFE_KEYS.has(s))) continue
    let node: any = root
    for (let i = 0; i < segments.length; i++) {
      let segment = segments[i] as string
      if (segment === '' && Array.isArray(node)) segment = String(node.length)
      if (i === segments.length - 1) {
        node[segment] = value
        break
      }
      const next = segments[i + 1] as string
      if (node[segment] === null || typeof node[segment] !== 'object') node[segment] = /^\d*$/.test(next) ? [] : {}
      node = node[segment]
    }
  }
  return compactArrays(root) as Obj
}

function compactArrays (value: unknown): unknown {
  if (Array.isArray(value)) return value.filter(() => true).map(compactArrays)
  if (value !== null && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) (value as Obj)[k] = compactArrays(v)
  }
  return value
}

/**
 * Stripe answers `Received unknown parameter` for a parameter an endpoint does not take.
 * The stand-in takes only the parameters the service sends (billing/stripe-provider.ts), so
 * a test that needs another one fails loudly here instead of being answered wrongly.
 */
export function rejectUnknown (params: Obj, known: string[], prefix?: string): void {
  for (const key of Object.keys(params)) {
    if (known.includes(key)) continue
    const param = prefix ? `${prefix}[${key}]` : key
    throw new ApiError(400, 'invalid_request_error', `Received unknown parameter: ${param} (not implemented by the stand-in)`,
      { code: 'parameter_unknown', param })
  }
}

export function parseBoolean (value: unknown, param: string): boolean | undefined {
  if (value === undefined) return undefined
  if (value === 'true') return true
  if (value === 'false') return false
  throw invalid(`Invalid boolean: ${String(value)}`, param)
}

export function optionalString (value: unknown, param: string): string | null | undefined {
  if (value === undefined) return undefined
  if (value === '') return null
  if (typeof value !== 'string') throw invalid(`Invalid string: ${JSON.stringify(value)}`, param)
  return value
}

/** Metadata as Stripe takes it on create: string values (an empty one sets nothing), keys up to 40 characters, values up to 500, at most 50 keys. */
export function readMetadata (value: unknown, param = 'metadata'): Obj {
  if (value === undefined || value === '') return {}
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw invalid('Invalid object', param)
  const metadata: Obj = {}
  for (const [key, entry] of Object.entries(value as Obj)) {
    if (typeof entry !== 'string') throw invalid(`Invalid value for metadata key '${key}': must be a string`, `${param}[${key}]`)
    if (key.length > 40) throw invalid(`Metadata keys can have up to 40 characters. Key '${key}' has ${key.length}.`, `${param}[${key}]`)
    if (entry.length > 500) throw invalid(`Metadata values can have up to 500 characters, but you passed in a value that is ${entry.length} characters.`, `${param}[${key}]`)
    if (entry !== '') metadata[key] = entry
  }
  if (Object.keys(metadata).length > 50) throw invalid('You can specify up to 50 keys for metadata.', param)
  return metadata
}
