// Schema validation, per part of the request (Fastify's setValidatorCompiler by httpPart):
// - JSON bodies are typed already and validated as sent: `null` or "true" for a boolean is a
//   400, not a silent false or true;
// - query strings and path params arrive as text and are coerced ("5" → 5), but an integer
//   only from its canonical decimal text: "0x10", "5e0", " 5", "5.0", "1e400" or "Infinity"
//   are 400s, not 16, 5 or an infinity that passes every bound;
// - date-times only as what PostgreSQL stores and gives back: RFC 3339 with at most six
//   fractional digits, an offset within ±14:00, a UTC year from 1 to 9999.
// Unknown fields and query parameters are refused, never dropped; every failing field is
// reported, up to MAX_DETAILS: a body with more unknown fields than that is refused on those
// before the rest is validated. A route whose body or query schema would let unknown fields
// through (an object that does not say `additionalProperties: false`) is refused at start-up.
import { Ajv, type ErrorObject, type Options, type ValidateFunction } from 'ajv'
import addFormatsModule from 'ajv-formats'
import fastUri from 'fast-uri'
import fp from 'fastify-plugin'
import { MAX_DETAILS } from '../errors.js'

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv

const AJV_OPTIONS: Options = {
  // Unknown fields are refused, not silently dropped (docs/api.md, Strict bodies).
  removeAdditional: false,
  useDefaults: true,
  // Every invalid field in `details`; each body is at most 1 MiB and the details are capped
  // (errors.ts), so the extra work is bounded.
  allErrors: true,
  // parentSchema on errors, so our `errorMessage` keyword can be read back.
  verbose: true,
  // errorMessage: ours (errors.ts); x-examples: @fastify/swagger's parameter examples, an annotation.
  keywords: ['errorMessage', 'x-examples'],
  uriResolver: fastUri,
  addUsedSchema: false
}

const CANONICAL_INTEGER = /^(0|-?[1-9][0-9]{0,15})$/

const DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d{1,6})?([Zz]|([+-])(\d{2}):(\d{2}))$/
const MAX_OFFSET_MINUTES = 14 * 60

const isLeapYear = (year: number) => (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0
const DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
const daysIn = (year: number, month: number) => month === 2 && isLeapYear(year) ? 29 : DAYS_IN_MONTH[month - 1] ?? 0

/** An RFC 3339 date-time that PostgreSQL's timestamptz stores and returns as it means it. */
export function isStorableDateTime (value: string): boolean {
  const match = DATE_TIME.exec(value)
  if (match === null) return false
  const year = Number(match[1])
  const day = Number(match[3])
  if (day < 1 || day > daysIn(year, Number(match[2])) || Number(match[4]) > 23 || Number(match[5]) > 59 || Number(match[6]) > 59) return false
  if (match[9] !== undefined) {
    const offsetHours = Number(match[10])
    const offsetMinutes = Number(match[11])
    if (offsetMinutes > 59 || offsetHours * 60 + offsetMinutes > MAX_OFFSET_MINUTES) return false
  }
  // The offset can carry a date past either end of PostgreSQL's years (9999-12-31T23:59:59-14:00,
  // 0001-01-01T00:00:00+01:00), or bring year 0 into year 1: at most 14 hours, so only in those
  // years (on a body's every date-time, this check was half the function's time: issue 34).
  if (year > 1 && year < 9999) return true
  const utcYear = new Date(Date.parse(value.replace(' ', 'T'))).getUTCFullYear()
  return utcYear >= 1 && utcYear <= 9999
}

function newAjv (coerceTypes: Options['coerceTypes']): Ajv {
  const ajv = addFormats(new Ajv({ ...AJV_OPTIONS, coerceTypes }))
  ajv.addFormat('date-time', { type: 'string', validate: isStorableDateTime })
  return ajv
}

interface ObjectSchema { properties?: Record<string, { type?: unknown }> }

/**
 * Query strings and params: ajv coerces any text Number() reads; integers must first be
 * canonical. The error has ajv's shape, so it is reported like any other.
 */
function canonicalIntegers (schema: ObjectSchema, validate: ValidateFunction): ValidateFunction {
  const integers = Object.entries(schema.properties ?? {}).filter(([, property]) => property.type === 'integer')
  if (integers.length === 0) return validate
  const checked = ((data: Record<string, unknown>) => {
    for (const [name, property] of integers) {
      const raw = data?.[name]
      if (typeof raw === 'string' && !CANONICAL_INTEGER.test(raw)) {
        checked.errors = [{ instancePath: `/${name}`, schemaPath: `#/properties/${name}/type`, keyword: 'type', params: { type: 'integer' }, message: 'must be integer', parentSchema: property }]
        return false
      }
    }
    const valid = validate(data)
    checked.errors = validate.errors
    return valid
  }) as ValidateFunction
  return checked
}

/**
 * Bodies: one with more unknown fields than a refusal reports (MAX_DETAILS) is refused on
 * those at once. With allErrors ajv would build an error for each of thousands of keys,
 * all but twenty of them to be dropped.
 */
function unknownFieldsFirst (schema: ObjectSchema & { additionalProperties?: unknown }, validate: ValidateFunction): ValidateFunction {
  if (schema.additionalProperties !== false || schema.properties === undefined) return validate
  const known = new Set(Object.keys(schema.properties))
  const checked = ((data: unknown) => {
    if (data !== null && typeof data === 'object' && !Array.isArray(data)) {
      const unknown: string[] = []
      for (const key in data) {
        if (!known.has(key) && unknown.push(key) > MAX_DETAILS) break
      }
      if (unknown.length > MAX_DETAILS) {
        checked.errors = unknown.slice(0, MAX_DETAILS).map((key) => ({
          instancePath: '', schemaPath: '#/additionalProperties', keyword: 'additionalProperties', params: { additionalProperty: key }, message: 'must NOT have additional properties'
        }))
        return false
      }
    }
    const valid = validate(data)
    checked.errors = validate.errors
    return valid
  }) as ValidateFunction
  return checked
}

/**
 * A validator compiled when its route first validates a request, not at start-up: compiling
 * every route's schemas was a third of the time to the first answer (issue 34), and most
 * instances never see most routes' requests in their first seconds. Its first request pays a
 * few milliseconds; a schema ajv cannot compile is a 500 there (every route's schemas are
 * compiled by the test suite, which sends each route requests).
 */
function onFirstUse (build: () => ValidateFunction): ValidateFunction {
  let validate: ValidateFunction | undefined
  const checked = ((data: unknown) => {
    validate ??= build()
    const valid = validate(data)
    checked.errors = validate.errors
    return valid
  }) as ValidateFunction
  return checked
}

// What a route without query parameters accepts: none. An unknown parameter is refused as
// an unknown body field is, not ignored.
const NO_QUERY = { type: 'object', properties: {}, additionalProperties: false }

/**
 * A query schema without properties, checked without ajv: none accepted (NO_QUERY, with the
 * errors ajv gives for it: test/platform/query-validation.test.ts holds the two to the same errors),
 * or any (the probes'). Most routes take no query, and the probes' first request (a
 * balancer's, at start-up) would otherwise compile ajv's first schema and add every shared
 * one: ~25 ms of the time to the first answer (issue 34).
 */
function withoutProperties (schema: unknown): ValidateFunction | undefined {
  if (!isNode(schema) || schema.type !== 'object') return undefined
  const { type, properties, additionalProperties, required, ...rest } = schema
  const noProperties = properties === undefined || (isNode(properties) && Object.keys(properties).length === 0)
  const noneRequired = required === undefined || (Array.isArray(required) && required.length === 0)
  if (Object.keys(rest).length > 0 || !noProperties || !noneRequired) return undefined
  if (additionalProperties === false) return noQueryParameters as unknown as ValidateFunction
  if (additionalProperties === true) return anyQueryParameters as unknown as ValidateFunction
  return undefined
}

function anyQueryParameters (): boolean {
  return true
}
anyQueryParameters.errors = null as ErrorObject[] | null

export function noQueryParameters (data: unknown): boolean {
  const errors: ErrorObject[] = []
  if (data !== null && typeof data === 'object') {
    for (const key in data) {
      const params = { additionalProperty: key }
      errors.push({ instancePath: '', schemaPath: '#/additionalProperties', keyword: 'additionalProperties', params, message: 'must NOT have additional properties', parentSchema: NO_QUERY })
    }
  }
  noQueryParameters.errors = errors.length === 0 ? null : errors
  return errors.length === 0
}
noQueryParameters.errors = null as ErrorObject[] | null

type SchemaNode = Record<string, unknown>
const isNode = (value: unknown): value is SchemaNode => value !== null && typeof value === 'object' && !Array.isArray(value)

/**
 * Where a schema accepts unknown fields: each object in it (shared schemas followed by
 * their $ref) that leaves `additionalProperties` unsaid, JSON Schema's default being to
 * accept anything. A schema that means to accept unknown fields says
 * `additionalProperties: true`.
 */
function openObjects (schema: unknown, resolve: (id: string) => unknown, at = '', seen = new Set<unknown>()): string[] {
  if (!isNode(schema) || seen.has(schema)) return []
  seen.add(schema)
  if (typeof schema.$ref === 'string') return openObjects(resolve(schema.$ref), resolve, at, seen)
  const found: string[] = []
  const properties = isNode(schema.properties) ? schema.properties : undefined
  if ((schema.type === 'object' || properties !== undefined) && schema.additionalProperties === undefined && schema.unevaluatedProperties === undefined) {
    found.push(at === '' ? '/' : at)
  }
  for (const [name, inner] of Object.entries(properties ?? {})) found.push(...openObjects(inner, resolve, `${at}/${name}`, seen))
  if (isNode(schema.additionalProperties)) found.push(...openObjects(schema.additionalProperties, resolve, `${at}/*`, seen))
  found.push(...openObjects(schema.items, resolve, `${at}/[]`, seen))
  for (const key of ['anyOf', 'oneOf', 'allOf']) {
    const branches = schema[key]
    if (Array.isArray(branches)) for (const branch of branches) found.push(...openObjects(branch, resolve, at, seen))
  }
  return found
}

export default fp(async function validation (fastify) {
  const bodies = newAjv(false)
  const text = newAjv('array')
  fastify.addHook('onRoute', function (route) {
    if (route.schema !== undefined && route.schema.hide !== true && route.schema.querystring === undefined) {
      route.schema = { ...route.schema, querystring: NO_QUERY }
    }
    // Closed by default: a new route cannot accept unknown fields by forgetting to refuse them.
    for (const part of ['body', 'querystring'] as const) {
      const open = openObjects(route.schema?.[part], (id) => this.getSchema(id))
      if (open.length > 0) {
        throw new Error(`${String(route.method)} ${route.url}: its ${part} schema accepts unknown fields at ${open.join(', ')}; ` +
          'add additionalProperties: false (or true, to accept them on purpose)')
      }
    }
  })
  // The shared schemas ($id) that route schemas reference, known to both before the first route compiles.
  let shared = false
  fastify.setValidatorCompiler((route) => (route.httpPart === 'querystring' ? withoutProperties(route.schema) : undefined) ?? onFirstUse(() => compile(route)))
  const compile = ({ schema, httpPart }: { schema: object, httpPart?: string }): ValidateFunction => {
    if (!shared) {
      for (const external of Object.values(fastify.getSchemas())) {
        bodies.addSchema(external as object)
        text.addSchema(external as object)
      }
      shared = true
    }
    if (httpPart !== 'body') return canonicalIntegers(schema as ObjectSchema, text.compile(schema))
    const ref = (schema as { $ref?: unknown }).$ref
    const resolved = typeof ref === 'string' ? fastify.getSchema(ref) ?? schema : schema
    return unknownFieldsFirst(resolved as ObjectSchema, bodies.compile(schema))
  }
}, { name: 'validation', dependencies: ['shared-schemas'] })
