// Each route's body limit, derived from its body schema: the most bytes any valid body can
// take, so a hostile body is cut off while it arrives (413) instead of being read, parsed
// and validated. A sign-in body is a few kilobytes at most; a 1 MiB body of 90,000 keys
// sent there cost 100-180 ms of event loop to parse and validate. Routes whose body schema
// has no bound (the payment webhook, checked over its signature first) keep the server's
// limit (BODY_LIMIT), and a route that takes no body accepts only an empty one.
import type { FastifySchema } from 'fastify'
import fp from 'fastify-plugin'

/** What a route that takes no body accepts: nothing, `{}` or `null` (json-body.ts), and some whitespace. */
export const NO_BODY_LIMIT = 1024

// Whitespace a pretty-printing client adds around tokens; a fixed sum and a share, so small
// and large bodies both keep room.
const SLACK_BYTES = 1024
const SLACK_SHARE = 0.25
// The longest a JSON number needs (-1.7976931348623157e+308 has 24 characters).
const NUMBER_BYTES = 32
// A character counted once by maxLength (a code point) can take 12 bytes of JSON: a
// client that escapes everything outside ASCII writes an astral one as two \uXXXX escapes.
const BYTES_PER_CHARACTER = 12

interface JsonSchema {
  $ref?: string
  type?: string | string[]
  properties?: Record<string, JsonSchema>
  additionalProperties?: unknown
  items?: JsonSchema
  maxItems?: number
  maxLength?: number
  enum?: unknown[]
  const?: unknown
  anyOf?: JsonSchema[]
  oneOf?: JsonSchema[]
}

type Resolve = (id: string) => JsonSchema | undefined

const quoted = (text: string) => text.length * BYTES_PER_CHARACTER + 2
const literal = (value: unknown) => quoted(JSON.stringify(value) ?? 'null')

/** The most bytes a JSON document valid against `schema` can take, without whitespace; Infinity when unbounded. */
export function maxJsonBytes (schema: JsonSchema, resolve: Resolve, depth = 0): number {
  if (depth > 32) return Infinity
  if (schema.$ref !== undefined) {
    const target = resolve(schema.$ref)
    return target === undefined ? Infinity : maxJsonBytes(target, resolve, depth + 1)
  }
  if (schema.const !== undefined) return literal(schema.const)
  if (schema.enum !== undefined) return Math.max(...schema.enum.map(literal))
  const branches = schema.anyOf ?? schema.oneOf
  if (branches !== undefined) return Math.max(...branches.map((branch) => maxJsonBytes(branch, resolve, depth + 1)))
  const types = [schema.type ?? (schema.properties === undefined ? 'any' : 'object')].flat()
  return Math.max(...types.map((type) => {
    switch (type) {
      case 'null': return 4
      case 'boolean': return 5
      case 'integer':
      case 'number': return NUMBER_BYTES
      case 'string': return schema.maxLength === undefined ? Infinity : schema.maxLength * BYTES_PER_CHARACTER + 2
      case 'array': {
        if (schema.maxItems === undefined || schema.items === undefined) return Infinity
        return 2 + schema.maxItems * (maxJsonBytes(schema.items, resolve, depth + 1) + 1)
      }
      case 'object': {
        if (schema.additionalProperties !== false) return Infinity
        let bytes = 2
        for (const [key, value] of Object.entries(schema.properties ?? {})) bytes += quoted(key) + 1 + maxJsonBytes(value, resolve, depth + 1) + 1
        return bytes
      }
      default: return Infinity
    }
  }))
}

/** The body limit for a body schema: its largest valid body with room for whitespace, or undefined when unbounded. */
export function bodyLimitFor (schema: JsonSchema, resolve: Resolve): number | undefined {
  const bytes = maxJsonBytes(schema, resolve)
  return Number.isFinite(bytes) ? Math.ceil(bytes * (1 + SLACK_SHARE)) + SLACK_BYTES : undefined
}

export default fp(async function bodyLimits (fastify) {
  const resolve: Resolve = (id) => fastify.getSchema(id) as JsonSchema | undefined
  fastify.addHook('onRoute', (route) => {
    // A limit the route states itself stands.
    if (route.bodyLimit !== undefined) return
    const body = (route.schema as FastifySchema | undefined)?.body as JsonSchema | undefined
    route.bodyLimit = body === undefined ? NO_BODY_LIMIT : bodyLimitFor(body, resolve)
  })
}, { name: 'body-limits', dependencies: ['shared-schemas'] })
