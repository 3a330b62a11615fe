// Every response a test receives through app.inject is checked against the OpenAPI
// document the app generates: the status must be documented for that operation, and
// the body must match that status's schema and content type. A route that answers an
// undocumented status or shape fails the test that saw it.
import type { FastifyInstance, InjectOptions, LightMyRequestResponse, RouteOptions } from 'fastify'
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js'
import addFormatsModule from 'ajv-formats'

const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => Ajv2020

interface Response { $ref?: string, content?: Record<string, { schema: object }> }
interface Operation { responses: Record<string, Response> }
interface Document { paths: Record<string, Record<string, Operation>>, components?: { responses?: Record<string, Response> } }
interface Route { method: string, pattern: RegExp, operation: Operation, path: string }

const ENVELOPE = /^\{"success":false,"error":"[^"]+","code":"[A-Z_]+"(,"details":\[.*\])?\}$/

export class ContractViolation extends Error {
  override name = 'ContractViolation'
}

function compileRoutes (document: Document): Route[] {
  return Object.entries(document.paths).flatMap(([path, operations]) =>
    Object.entries(operations).map(([method, operation]) => ({
      method: method.toUpperCase(),
      path,
      operation,
      pattern: new RegExp(`^${path.replace(/\{[^}]+\}/g, '[^/]+')}$`)
    })))
}

/** What checking against one document needs, compiled once per process for each distinct document. */
interface Contract {
  ajv: Ajv2020
  routes: Route[]
  responses: Record<string, Response>
  validatorFor: (pointer: string) => ValidateFunction
}

// Apps with equal settings generate equal documents: they share the compiled validators
// (a suite's process builds dozens of apps).
const contracts = new Map<string, Contract>()

function contractFor (document: Document): Contract {
  const key = JSON.stringify(document)
  let contract = contracts.get(key)
  if (contract !== undefined) return contract
  const ajv = addFormats(new Ajv2020({ strict: false, allErrors: true }))
  ajv.addSchema(document, 'openapi.json')
  const validators = new Map<string, ValidateFunction>()
  contract = {
    ajv,
    routes: compileRoutes(document),
    responses: document.components?.responses ?? {},
    // By JSON pointer into the document itself, so the schemas' references to
    // #/components/schemas/… resolve as a client's would.
    validatorFor: (pointer) => {
      let validate = validators.get(pointer)
      if (!validate) validators.set(pointer, validate = ajv.compile({ $ref: `openapi.json#${pointer}` }))
      return validate
    }
  }
  contracts.set(key, contract)
  return contract
}

/** A Fastify route URL (`/tasks/:id`, `/docs/*`) as a pattern for request paths. */
const urlPattern = (url: string) => new RegExp(`^${url.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/:[^/]+/g, '[^/]+').replace(/\*/g, '.*')}$`)

/**
 * Call before the app registers its routes: it learns from them which are served but left
 * out of the document (`schema.hide`: /openapi.json, /docs, /metrics), and skips those.
 */
export function enforceContract (app: FastifyInstance): void {
  let contract: Contract | undefined
  // Read when checking, not when the route is added: a later onRoute hook may still hide it
  // (plugins/app/api-reference.ts does, for /docs).
  const routeOptions: RouteOptions[] = []
  app.addHook('onRoute', (route) => { routeOptions.push(route) })
  let hidden: Array<{ methods: string[], pattern: RegExp }> | undefined
  const isHidden = (method: string, path: string) => {
    hidden ??= routeOptions.filter((route) => route.schema?.hide === true)
      .map((route) => ({ methods: [route.method].flat(), pattern: urlPattern(route.url) }))
    return hidden.some((route) => route.methods.includes(method) && route.pattern.test(path))
  }
  const escape = (segment: string) => segment.replaceAll('~', '~0').replaceAll('/', '~1')

  const check = (options: InjectOptions, res: LightMyRequestResponse) => {
    contract ??= contractFor(app.swagger() as unknown as Document)
    const { ajv, routes, responses, validatorFor } = contract
    const method = (options.method ?? 'GET').toUpperCase()
    const url = new URL(String(options.url ?? options.path ?? '/'), 'http://x')
    if (method === 'OPTIONS' || isHidden(method, url.pathname)) return
    const where = `${method} ${url.pathname} → ${res.statusCode}`
    const route = routes.find((r) => r.method === method && r.pattern.test(url.pathname)) ??
      (method === 'HEAD' ? routes.find((r) => r.method === 'GET' && r.pattern.test(url.pathname)) : undefined)
    if (route === undefined) {
      // Unknown routes: the not-found envelope (or a framework-level refusal, still enveloped).
      if (!ENVELOPE.test(res.body)) throw new ContractViolation(`${where}: unknown route answered without the error envelope: ${res.body.slice(0, 200)}`)
      return
    }
    let documented = route.operation.responses[String(res.statusCode)]
    // A shared response (#/components/responses/…) is read where it is defined.
    let pointer = `/paths/${escape(route.path)}/${route.method.toLowerCase()}/responses/${res.statusCode}`
    if (documented?.$ref !== undefined) {
      pointer = documented.$ref.slice(1)
      documented = responses[documented.$ref.replace('#/components/responses/', '')]
    }
    if (documented === undefined) {
      throw new ContractViolation(`${where}: status not documented for ${route.method.toLowerCase()} ${route.path} (documented: ${Object.keys(route.operation.responses).join(', ')}); body ${res.body.slice(0, 200)}`)
    }
    if (method === 'HEAD') return
    const contentType = String(res.headers['content-type'] ?? '').split(';')[0]!.trim()
    const content = documented.content
    if (content === undefined) return
    const media = content[contentType]
    if (media === undefined) throw new ContractViolation(`${where}: content type ${contentType || '(none)'} not documented (documented: ${Object.keys(content).join(', ')})`)
    const body = contentType === 'application/json' ? res.json() : res.body
    const validate = validatorFor(`${pointer}/content/${escape(contentType)}/schema`)
    if (!validate(body)) {
      throw new ContractViolation(`${where}: body does not match the documented schema: ${ajv.errorsText(validate.errors)}; body ${res.body.slice(0, 300)}`)
    }
  }

  const inject = app.inject.bind(app)
  app.inject = ((options?: InjectOptions | string, callback?: unknown) => {
    if (options === undefined || callback !== undefined) return (inject as (...args: unknown[]) => unknown)(options, callback)
    const opts: InjectOptions = typeof options === 'string' ? { url: options } : options
    return inject(opts).then((res) => { check(opts, res); return res })
  }) as typeof app.inject
}
