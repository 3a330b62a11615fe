// Steady load through the balancer: reads and writes from many users on many client
// addresses, at a fixed rate whatever the answers take (an open loop: a slow or failing
// instance does not slow the clients down, as real clients are not), every request's outcome
// kept, so failures are counted exactly and every write can be matched with what was stored.
import { randomUUID } from 'node:crypto'
import { Client } from './client.js'

export interface LoadUser { id: string, token: string }

export interface RequestRecord {
  kind: 'list' | 'me' | 'create'
  startedAt: number
  endedAt: number
  /** 0: no answer (a reset, a refused or closed connection, a timeout). */
  status: number
  error?: string
  /** An answer other than the one expected: who gave it (the service's error `code`, or `balancer` for a body that is not the service's envelope). */
  answeredBy?: string
  /** Writes: the task's title, unique per request. */
  title?: string
  /** Writes: the Idempotency-Key sent, when the load sends one. */
  key?: string
}

export interface LoadOptions {
  port: number
  /** Requests started per second. */
  rate: number
  clients: Client[]
  users: LoadUser[]
  /** Share of requests that are writes (POST /tasks); the rest are GET /tasks and GET /auth/me. */
  writeShare?: number
  /** Titles of this load's writes start with it. */
  tag: string
  /** Send an Idempotency-Key with every write (issue 23 §3). */
  idempotencyKeys?: boolean
}

const EXPECTED = { list: 200, me: 200, create: 201 } as const

export class Load {
  readonly records: RequestRecord[] = []
  #timer: NodeJS.Timeout | undefined
  #inFlight = new Set<Promise<void>>()
  #sent = 0
  #startedAt = 0

  constructor (readonly options: LoadOptions) {}

  start (): void {
    this.#startedAt = performance.now()
    // Every 10 ms, whatever is due: the rate holds even when a tick comes late.
    this.#timer = setInterval(() => {
      const due = Math.floor((performance.now() - this.#startedAt) * this.options.rate / 1000)
      while (this.#sent < due) this.#fire(this.#sent++)
    }, 10)
  }

  /** Stops starting requests and waits for those in flight. */
  async stop (): Promise<void> {
    clearInterval(this.#timer)
    await Promise.all([...this.#inFlight])
  }

  #fire (n: number): void {
    const { clients, users, writeShare = 0.25, port, tag } = this.options
    const client = clients[n % clients.length]!
    const user = users[Math.floor(Math.random() * users.length)]!
    const auth = { authorization: `Bearer ${user.token}` }
    const roll = Math.random()
    const record: RequestRecord = { kind: roll < writeShare ? 'create' : roll < writeShare + (1 - writeShare) / 2 ? 'list' : 'me', startedAt: Date.now(), endedAt: 0, status: 0 }
    let sent
    if (record.kind === 'create') {
      record.title = `${tag}-${n}`
      if (this.options.idempotencyKeys) record.key = randomUUID()
      sent = client.send(port, '/tasks', { method: 'POST', headers: { ...auth, ...(record.key && { 'idempotency-key': record.key }) }, json: { title: record.title } })
    } else {
      sent = client.send(port, record.kind === 'list' ? '/tasks?limit=20' : '/auth/me', { headers: auth })
    }
    const done = sent.then((answer) => {
      record.status = answer.status
      if (failed(record)) record.answeredBy = answerer(answer.body)
    }, (err: Error & { code?: string }) => { record.error = err.code ?? err.message })
      .finally(() => {
        record.endedAt = Date.now()
        this.records.push(record)
        this.#inFlight.delete(done)
      })
    this.#inFlight.add(done)
  }
}

/** The service's envelope names its error's code; HAProxy's own answers are HTML. */
function answerer (body: string): string {
  try {
    const code: unknown = (JSON.parse(body) as { code?: unknown }).code
    if (typeof code === 'string') return code
  } catch {}
  return 'balancer'
}

/** A request that did not get the answer a healthy service gives it. */
export const failed = (record: RequestRecord): boolean => record.status !== EXPECTED[record.kind]

export interface Summary {
  sent: number
  perSecond: number
  failed: number
  /** Failures by status and who answered (`503 OVERLOADED`, `503 balancer`), or by the connection's error code. */
  failures: Record<string, number>
  writes: number
  /** Writes answered 201. */
  acknowledged: number
}

export function summarize (records: RequestRecord[]): Summary {
  const failures: Record<string, number> = {}
  for (const record of records.filter(failed)) {
    const reason = record.status === 0 ? record.error ?? 'no answer' : `${record.status} ${record.answeredBy ?? ''}`.trimEnd()
    failures[reason] = (failures[reason] ?? 0) + 1
  }
  const first = Math.min(...records.map((r) => r.startedAt))
  const last = Math.max(...records.map((r) => r.startedAt))
  return {
    sent: records.length,
    perSecond: Math.round(records.length / Math.max(1, (last - first) / 1000)),
    failed: records.filter(failed).length,
    failures,
    writes: records.filter((r) => r.kind === 'create').length,
    acknowledged: records.filter((r) => r.kind === 'create' && r.status === 201).length
  }
}
