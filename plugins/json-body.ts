// Request bodies are JSON only, parsed once here: a text/plain body is a 415 rather than a
// string handed to validation, NUL characters are refused at the door, nesting deeper than
// any valid body is refused before it is parsed, and a body-less route treats an empty JSON
// body as none (browser fetch wrappers send the header anyway).
import fp from 'fastify-plugin'
import { ValidationError } from '../errors.js'

// Iterative: a hostile body can nest deeper than the call stack.
function containsNul (root: unknown): boolean {
  const pending = [root]
  while (pending.length > 0) {
    const value = pending.pop()
    if (typeof value === 'string') {
      if (value.includes('\0')) return true
    } else if (value !== null && typeof value === 'object') {
      for (const [key, inner] of Object.entries(value)) {
        if (key.includes('\0')) return true
        pending.push(inner)
      }
    }
  }
  return false
}

/** No valid body nests deeper than this; the schemas' own depth is 2 at most. */
export const MAX_NESTING = 16

/**
 * Whether the JSON text opens more than `max` arrays or objects inside one another. One pass
 * over the text that ends at the first level too deep: `[[[…` 150 KB deep is refused after
 * 17 characters, where parsing it would build every level first.
 */
export function nestsDeeperThan (text: string, max: number): boolean {
  let depth = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 0x5c) i++ // a backslash: the next character is escaped
      else if (c === 0x22) inString = false
    } else if (c === 0x22) {
      inString = true
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) return true
    } else if (c === 0x5d || c === 0x7d) {
      depth--
    }
  }
  return false
}

const isEmptyJson = (value: unknown): boolean =>
  value === null || (typeof value === 'object' && !Array.isArray(value) && Object.keys(value as object).length === 0)

export default fp(async function jsonBody (fastify) {
  // JSON only: a text/plain body on a JSON route is a 415, not a string handed to validation.
  fastify.removeContentTypeParser('text/plain')
  // PostgreSQL text cannot hold NUL: refuse it at the door (400) rather than fail in SQL (500).
  // The string check is cheap; the walk only runs when the body mentions \u0000.
  const parseJson = fastify.getDefaultJsonParser('error', 'error')
  fastify.removeContentTypeParser('application/json')
  fastify.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const text = body as string
    // Browser fetch wrappers send `Content-Type: application/json` on body-less calls too
    // (sign-out, deletes): on a route that takes no body, an empty body is no body. Any
    // other body there is refused rather than silently ignored; `{}` and `null` say nothing.
    // An unknown route answers 404 whatever its body.
    if (request.is404) return done(null, undefined)
    const bodyless = request.routeOptions.schema?.body === undefined
    if (bodyless && text.trim() === '') return done(null, undefined)
    // Refusals in the route's own validation code (the login form's is INVALID_INPUT).
    const refuse = (detail: string) => done(new ValidationError([`${detail} - body`], request.routeOptions.config.validationCode))
    if (nestsDeeperThan(text, MAX_NESTING)) return refuse(`Must not nest more than ${MAX_NESTING} levels deep`)
    parseJson(request, text, (err: Error | null, value?: unknown) => {
      if (err) return done(err)
      if (bodyless) return isEmptyJson(value) ? done(null, undefined) : refuse('This operation takes no body')
      if (text.includes('\\u0000') && containsNul(value)) return refuse('Must not contain NUL characters')
      done(null, value)
    })
  })
}, { name: 'json-body' })
