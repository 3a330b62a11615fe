// What each scenario sends: autocannon request sets that rotate through the seeded users'
// tokens, the writers' tasks, signed webhook deliveries and sign-ins.
import { randomBytes, randomUUID } from 'node:crypto'
import type { Request } from './load.js'
import { emailOf, PASSWORD } from './seed.js'
import type { Accounts, RunOptions, ScenarioName, Settings } from './types.js'
import { DeliveryPool } from './webhooks.js'

/** How a scenario's run differs: sign-ins queue behind bcrypt, so no warm-up (it would leave a queue behind) and a long timeout. */
export const runOptionsFor = (name: ScenarioName): RunOptions => name === 'login' ? { warmup: 0, timeout: 60 } : {}

export const JSON_HEADERS = { 'content-type': 'application/json' }
export const bearer = (token: string) => ({ authorization: `Bearer ${token}` })

function rotate<T> (items: T[]): () => T {
  if (items.length === 0) throw new Error('nothing to rotate')
  let i = 0
  return () => items[i++ % items.length]!
}

export class RequestSets {
  /** Deliveries for the webhook scenario; prepare() them before its run. */
  readonly webhooks: DeliveryPool

  constructor (private readonly accounts: Accounts, private readonly settings: Settings) {
    this.webhooks = new DeliveryPool(settings.customers, randomBytes(4).toString('hex'))
  }

  /** Signs webhook deliveries ahead for `seconds` of load (warm-up included), so signing does not slow the load generator. */
  prepareWebhooks (seconds: number): void {
    this.webhooks.prepare(Math.ceil(seconds * 1500) + 500)
  }

  /** GET /tasks (with `query`), as each of `tokens` in turn (default: the readers). */
  listTasks (query = '', tokens = this.accounts.readerTokens): Request {
    const next = rotate(tokens)
    return { method: 'GET', path: `/tasks${query}`, setupRequest: (req) => ({ ...req, headers: { ...req.headers, ...bearer(next()) } }) }
  }

  /** The requests of a scenario; each call starts its rotations afresh. */
  for (name: ScenarioName): Request[] {
    const { readerTokens, writerEmails, writerTasks, token } = this.accounts
    switch (name) {
      case 'health': return [{ method: 'GET', path: '/health' }]
      case 'tasks.list': return [this.listTasks()]
      case 'tasks.list.filtered': return [this.listTasks('?status=todo&limit=20')]
      case 'tasks.create': {
        const next = rotate(writerEmails.map(token))
        const body = JSON.stringify({ title: 'Benchmark task', description: 'Created by npm run bench', dueDate: '2026-12-01T09:00:00Z' })
        return [{ method: 'POST', path: '/tasks', body, setupRequest: (req) => ({ ...req, headers: { ...req.headers, ...JSON_HEADERS, ...bearer(next()) } }) }]
      }
      case 'tasks.create.keyed': {
        // As tasks.create, each request with an Idempotency-Key of its own (a first request, never a replay).
        const next = rotate(writerEmails.map(token))
        const body = JSON.stringify({ title: 'Benchmark task', description: 'Created by npm run bench', dueDate: '2026-12-01T09:00:00Z' })
        return [{ method: 'POST', path: '/tasks', body, setupRequest: (req) => ({ ...req, headers: { ...req.headers, ...JSON_HEADERS, ...bearer(next()), 'idempotency-key': randomUUID() } }) }]
      }
      case 'tasks.update': {
        const pairs = writerEmails.flatMap((email, w) => (writerTasks[w] ?? []).map((id) => ({ token: token(email), id })))
        let n = 0
        const next = rotate(pairs)
        return [{
          method: 'PATCH',
          path: '/tasks/0',
          setupRequest: (req) => {
            const pair = next()
            const body = (n++ % 2) === 0 ? '{"status":"completed"}' : '{"status":"in-progress","title":"Benchmark update"}'
            return { ...req, path: `/tasks/${pair.id}`, body, headers: { ...req.headers, ...JSON_HEADERS, ...bearer(pair.token) } }
          }
        }]
      }
      case 'preferences.get': {
        const next = rotate(readerTokens)
        return [{ method: 'GET', path: '/preferences', setupRequest: (req) => ({ ...req, headers: { ...req.headers, ...bearer(next()) } }) }]
      }
      case 'webhook':
        return [{
          method: 'POST',
          path: '/webhooks/payment',
          setupRequest: (req) => {
            const delivery = this.webhooks.take()
            return { ...req, body: delivery.body, headers: { ...req.headers, ...delivery.headers } }
          }
        }]
      case 'login': {
        let n = 0
        const users = this.settings.users
        return [{
          method: 'POST',
          path: '/auth/login',
          setupRequest: (req) => ({
            ...req,
            headers: { ...req.headers, ...JSON_HEADERS },
            body: JSON.stringify({ email: emailOf(1 + (n++ % users)), password: PASSWORD })
          })
        }]
      }
    }
  }
}
