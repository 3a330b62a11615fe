// The stand-in's HTTP side: reads and records each request, holds the ones it was told to
// (a slow provider), answers the failures it was told to, checks the API key, replays
// idempotent POSTs (and refuses a repeat while the first still runs), and writes Stripe's responses.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import Stripe from 'stripe'
import type { RecordedCall } from '../stripe-stand-in.js'
import { ApiError } from './errors.js'
import { parseForm } from './form.js'
import { ids } from './ids.js'

type Obj = Record<string, any>

/** 'error': 500 api_error; 'timeout': never answered; 'refusal': 400 invalid_request_error without a code (a request Stripe will not carry out). */
export type Failure = 'error' | 'timeout' | 'refusal'

/** Which requests something applies to: a method and a path (exact, or a pattern); unset, any. */
export interface RequestMatch { method?: string, path?: string | RegExp }

export interface PendingFailure extends RequestMatch { mode: Failure }

/**
 * A request to hold until released: recorded at once, carried out and answered once released.
 * 'abandoned': its client stopped waiting (timed out) while it was held.
 */
export interface PendingHold extends RequestMatch {
  state: 'waiting' | 'holding' | 'abandoned' | 'released'
  arrive: () => void
  released: Promise<void>
  release: () => void
}

const matches = (match: RequestMatch, method: string, path: string): boolean =>
  (match.method === undefined || match.method === method) &&
  (match.path === undefined || (typeof match.path === 'string' ? match.path === path : match.path.test(path)))

/** Takes the first entry of `list` that applies to the request out of it. */
function take<T extends RequestMatch> (list: T[], method: string, path: string, usable: (entry: T) => boolean = () => true): T | undefined {
  const index = list.findIndex((entry) => usable(entry) && matches(entry, method, path))
  return index === -1 ? undefined : list.splice(index, 1)[0]
}

/** A request as read and recorded; `headers` are those of its answer. */
interface Incoming {
  method: string
  path: string
  params: Obj
  headers: Record<string, string>
  requestId: string
  idempotencyKey: string | undefined
  authorization: string | undefined
}

/** Answers one API request (throws ApiError for Stripe's error answers). */
export type Route = (method: string, path: string, params: Obj) => Obj

/** Serves a request outside the API (`/v1/…`): Stripe's hosted pages (hosted-pages.ts). Not recorded. */
export type PageHandler = (req: IncomingMessage, res: ServerResponse) => Promise<void>

export interface ServeOptions {
  /** Default 0: a free port. */
  port?: number
  pages?: PageHandler
}

function checkAuth (header: string | undefined): void {
  if (!header) {
    throw new ApiError(401, 'invalid_request_error',
      "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY'). See https://stripe.com/docs/api#authentication for details, or we can help at https://support.stripe.com/.")
  }
  const key = /^Bearer (\S+)$/.exec(header)?.[1]
  if (!key || !/^sk_test_\w+$/.test(key)) {
    const shown = key ? `${key.slice(0, 8)}${'*'.repeat(Math.max(0, key.length - 12))}${key.slice(-4)}` : header
    throw new ApiError(401, 'invalid_request_error', `Invalid API Key provided: ${shown}`, { code: 'api_key_invalid' })
  }
}

function send (res: ServerResponse, status: number, body: string, headers: Record<string, string>): void {
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': String(Buffer.byteLength(body)),
    'cache-control': 'no-cache, no-store',
    ...headers
  })
  res.end(body)
}

/**
 * Serves `route` on 127.0.0.1 at a free port (or `options.port`). Every API request is pushed
 * to `calls`; one that a hold in `holds` applies to waits until it is released; then one that
 * a failure in `failures` applies to takes it instead of an answer. Other paths go to
 * `options.pages` when given.
 */
export async function serve (
  route: Route, calls: RecordedCall[], failures: PendingFailure[], holds: PendingHold[], options: ServeOptions = {}
): Promise<{ url: string, close: () => Promise<void> }> {
  const idempotent = new Map<string, { method: string, path: string, fingerprint: string, status: number, body: string }>()
  /** Keys of the requests being carried out (held, or running) now. */
  const inFlight = new Set<string>()
  const held = new Set<ServerResponse>()
  const holding = new Set<PendingHold>()
  let closing = false

  async function handle (req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (options.pages !== undefined && !(req.url ?? '/').startsWith('/v1/')) {
      await options.pages(req, res)
      return
    }
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    const raw = Buffer.concat(chunks).toString('utf8')
    const url = new URL(req.url ?? '/', 'http://stand-in.invalid')
    const method = (req.method ?? 'GET').toUpperCase()
    const path = url.pathname
    const requestId = ids.request()
    const headers: Record<string, string> = { 'request-id': requestId, 'stripe-version': String(req.headers['stripe-version'] ?? Stripe.API_VERSION) }
    const idempotencyKey = typeof req.headers['idempotency-key'] === 'string' ? req.headers['idempotency-key'] : undefined
    const authorization = req.headers.authorization
    let params: Obj
    try {
      params = { ...parseForm(url.searchParams), ...parseForm(new URLSearchParams(raw)) }
    } catch {
      params = {}
    }
    const call: RecordedCall = { method, path, params }
    if (idempotencyKey !== undefined) call.idempotencyKey = idempotencyKey
    if (authorization !== undefined) call.authorization = authorization
    calls.push(call)

    // Stripe answers a keyed request while another with its key is still being carried out
    // with 409 `idempotency_key_in_use` (stripe-node retries a 409), never running it twice.
    const keyed = idempotencyKey !== undefined && method === 'POST' ? idempotencyKey : undefined
    if (keyed !== undefined && inFlight.has(keyed)) {
      send(res, 409, JSON.stringify(new ApiError(409, 'invalid_request_error',
        'There is currently another in-progress request using this idempotent key (that probably means you submitted twice, and the other request is still going through). Please try again later.',
        { code: 'idempotency_key_in_use' }).body(requestId), null, 2), headers)
      return
    }
    if (keyed !== undefined) inFlight.add(keyed)
    try {
      await carryOut(res, { method, path, params, headers, requestId, idempotencyKey, authorization })
    } finally {
      if (keyed !== undefined) inFlight.delete(keyed)
    }
  }

  /** Holds, fails or answers a recorded request. */
  async function carryOut (res: ServerResponse, { method, path, params, headers, requestId, idempotencyKey, authorization }: Incoming): Promise<void> {
    const hold = take(holds, method, path, (entry) => entry.state === 'waiting')
    if (hold !== undefined) {
      // Like a slow provider: the request is carried out when released, whether or not the
      // client still waits for the answer.
      hold.state = 'holding'
      holding.add(hold)
      res.on('close', () => { if (hold.state === 'holding') hold.state = 'abandoned' })
      hold.arrive()
      await hold.released
      holding.delete(hold)
      if (closing) return
    }

    const failure = take(failures, method, path)?.mode
    if (failure === 'timeout') {
      held.add(res)
      res.on('close', () => held.delete(res))
      return
    }
    if (failure === 'error') {
      send(res, 500, JSON.stringify({
        error: { type: 'api_error', message: 'An unknown error occurred', request_log_url: `https://dashboard.stripe.com/test/logs/${requestId}` }
      }, null, 2), headers)
      return
    }
    if (failure === 'refusal') {
      send(res, 400, JSON.stringify(new ApiError(400, 'invalid_request_error', 'The stand-in refuses this request.').body(requestId), null, 2), headers)
      return
    }

    try {
      checkAuth(authorization)
      // The SDK keys every POST (the service passes its own keys); Stripe replays the first answer.
      if (idempotencyKey !== undefined && method === 'POST') {
        headers['idempotency-key'] = idempotencyKey
        const fingerprint = JSON.stringify(params)
        const previous = idempotent.get(idempotencyKey)
        if (previous) {
          if (previous.method !== method || previous.path !== path || previous.fingerprint !== fingerprint) {
            throw new ApiError(400, 'idempotency_error',
              `Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '${idempotencyKey}' if you meant to execute a different request.`)
          }
          send(res, previous.status, previous.body, { ...headers, 'idempotent-replayed': 'true' })
          return
        }
        const body = JSON.stringify(route(method, path, structuredClone(params)), null, 2)
        idempotent.set(idempotencyKey, { method, path, fingerprint, status: 200, body })
        send(res, 200, body, headers)
        return
      }
      send(res, 200, JSON.stringify(route(method, path, structuredClone(params)), null, 2), headers)
    } catch (error) {
      if (error instanceof ApiError) {
        send(res, error.status, JSON.stringify(error.body(requestId), null, 2), headers)
        return
      }
      send(res, 500, JSON.stringify({ error: { type: 'api_error', message: `stand-in failure: ${(error as Error).message}` } }, null, 2), headers)
    }
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (!res.headersSent) send(res, 500, JSON.stringify({ error: { type: 'api_error', message: String(error) } }), {})
    })
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(options.port ?? 0, '127.0.0.1', () => {
      server.off('error', reject)
      resolve()
    })
  })
  const { port } = server.address() as AddressInfo
  let closed: Promise<void> | undefined
  return {
    url: `http://127.0.0.1:${port}`,
    close () {
      closing = true
      for (const hold of holding) hold.release()
      closed ??= new Promise<void>((resolve) => {
        for (const res of held) res.socket?.destroy()
        held.clear()
        server.close(() => resolve())
        server.closeAllConnections()
      })
      return closed
    }
  }
}
