// Idempotency-Key: a retried POST is carried out once. A route opts in with
// `config: { idempotent: 'transaction' | 'lease' }`; a request without the header runs the
// route as it is (no query of ours). With a key, per user:
// - the first request with it runs, and when it succeeds (2xx) its status and body are kept
//   24 hours (db/idempotency.ts); a failure keeps nothing, so the key may be used again;
// - a repeat with the same method, route and body gets the kept answer, with
//   `Idempotent-Replayed: true`; with anything else, 422 IDEMPOTENCY_KEY_REUSED;
// - a repeat while the first still runs gets 409 IDEMPOTENCY_KEY_IN_USE (Retry-After: 1).
// 'transaction': the route's work is database writes through request.db, a transaction that
// also takes the key's lock and stores the answer: both commit or neither, so a crash at any
// point leaves either nothing (the retry runs it) or the work with its answer (the retry gets
// it). 'lease': the route calls the payment provider, which no transaction may wait on: the
// key is held under a lease while the route runs (a crashed instance's lease ends, and a
// retry then runs the route again), and request.idempotentRequestId, the same for every
// attempt, keys the provider's calls, so the provider carries out a repeated call once.
import { createHash, randomUUID } from 'node:crypto'
import fp from 'fastify-plugin'
import type { FastifyInstance, FastifyReply, FastifyRequest, FastifySchema, RouteOptions } from 'fastify'
import type { Kysely } from 'kysely'
import { Type } from 'typebox'
import {
  claimIdempotencyKey, completeIdempotencyKey, findIdempotencyRecord, lockIdempotencyKey, purgeIdempotencyKeys,
  releaseIdempotencyKey, storeIdempotentAnswer, type IdempotencyRecord
} from '../../db/idempotency.js'
import type { Database } from '../../db/types.js'
import { IdempotencyKeyInUseError, IdempotencyKeyReusedError } from '../../errors.js'
import { errorResponses, IdempotencyKey } from '../../schemas/common.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * Honours an Idempotency-Key header (plugins/app/idempotency.ts). 'transaction': the
     * handler writes through request.db only; 'lease': it passes request.idempotentRequestId
     * to the provider calls that create things. Either way it returns its answer rather
     * than sending it, so the answer can be kept before it goes out.
     */
    idempotent?: 'transaction' | 'lease'
  }
  interface FastifyRequest {
    /**
     * The database this request writes through: fastify.db, or, for a keyed request on an
     * `idempotent: 'transaction'` route, the transaction that also keeps its answer.
     */
    db: Kysely<Database>
    /**
     * For a keyed request on an `idempotent: 'lease'` route: an id every attempt of this
     * request shares (derived from the user, the key, the request and the key's first use),
     * for the provider's idempotency keys; null otherwise.
     */
    idempotentRequestId: string | null
  }
}

const REPLAYED_HEADER = 'idempotent-replayed'
/** How often each instance deletes the records past their 24 hours, and each user's beyond the bound. */
const PURGE_INTERVAL_MS = 10 * 60_000

type Handler = (this: FastifyInstance, request: FastifyRequest, reply: FastifyReply) => unknown

const kTransaction = Symbol('idempotency transaction')
type WithTransaction = FastifyRequest & { [kTransaction]: Kysely<Database> | null }

/** SHA-256 of the method, the route and the body with its keys sorted: equal for equal requests. */
function requestFingerprint (method: string, route: string, body: unknown): string {
  const canonical = JSON.stringify(body ?? null, (_key, value: unknown) =>
    value !== null && typeof value === 'object' && !Array.isArray(value)
      ? Object.fromEntries(Object.entries(value).sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0))
      : value)
  return createHash('sha256').update(`${method} ${route}\n`).update(canonical).digest('hex')
}

const keyInUse = () => Object.assign(new IdempotencyKeyInUseError(), { retryAfter: 1 })

/** What a keyed request meets: no live record (or a free one), or a kept answer to replay; otherwise it is refused. */
function decide (record: IdempotencyRecord | undefined, requestHash: string): { replay: { status: number, body: string } } | { replay: null } {
  if (record === undefined) return { replay: null }
  if (record.answer !== null || record.running) {
    if (record.requestHash !== requestHash) throw new IdempotencyKeyReusedError()
    if (record.answer === null) throw keyInUse()
    return { replay: record.answer }
  }
  return { replay: null }
}

function replay (reply: FastifyReply, answer: { status: number, body: string }): unknown {
  reply.code(answer.status).header(REPLAYED_HEADER, 'true')
  return JSON.parse(answer.body)
}

const isKept = (status: number) => status >= 200 && status < 300

function answerOf (reply: FastifyReply, payload: unknown): { status: number, body: string } {
  if (reply.sent) throw new Error(`${reply.request.method} ${reply.request.routeOptions.url} is idempotent: its handler must return its answer, not send it`)
  return { status: reply.statusCode, body: JSON.stringify(payload) }
}

/** A record committed between reading the key and storing ours: this attempt is rolled back. */
class LostRace extends Error {}

/** The header, and the 409 and 422 answers, in the route's schema (so in the OpenAPI document). */
function document (schema: FastifySchema): void {
  if (schema.headers !== undefined) throw new Error('an idempotent route has no headers schema of its own: plugins/app/idempotency.ts adds it')
  // Lower case: Node gives header names so, and with our own validator compiler Fastify
  // validates the schema as written.
  schema.headers = Type.Object({ 'idempotency-key': Type.Optional(IdempotencyKey) })
  const responses = { ...(schema.response as Record<string, Record<string, unknown>> | undefined) }
  const inUse = 'a request with the same Idempotency-Key still runs (`IDEMPOTENCY_KEY_IN_USE`)'
  const conflict = responses['409']
  responses['409'] = conflict === undefined
    ? { ...errorResponses(409)[409], description: `Conflict: ${inUse}` }
    : { ...conflict, description: `${String(conflict.description ?? 'Conflict')}; or ${inUse}` }
  responses['422'] = { ...errorResponses(422)[422] }
  for (const [status, response] of Object.entries(responses)) {
    if (!/^2\d\d$/.test(status)) continue
    responses[status] = {
      ...response,
      headers: {
        ...(response.headers as object | undefined),
        'idempotent-replayed': Type.Literal('true', { description: 'A repeat: the first answer to this Idempotency-Key' })
      }
    }
  }
  schema.response = responses
}

export default fp(async function idempotency (fastify) {
  const { config, db } = fastify
  const maxPerUser = config.limits.idempotencyKeysPerUser
  // Longer than the slowest handler (a checkout: up to three provider calls; see
  // CONNECTION_TIMEOUT_MS), so a repeat meets 409 rather than a second attempt while the first
  // is alive. Should one outlast it, the attempt that took over makes the same provider calls
  // under the same keys, and only one of them can store its answer.
  const leaseMs = config.http.connectionTimeoutMs

  fastify.decorateRequest(kTransaction, null)
  fastify.decorateRequest('db', {
    getter (this: FastifyRequest) { return (this as WithTransaction)[kTransaction] ?? db }
  })
  fastify.decorateRequest('idempotentRequestId', null)

  const inTransaction = (handler: Handler): Handler => async function (request, reply) {
    const key = request.headers['idempotency-key']
    if (typeof key !== 'string') return handler.call(this, request, reply)
    const userId = request.user.id
    const requestHash = requestFingerprint(request.method, request.routeOptions.url ?? '', request.body)
    // A record committed after our read (LostRace) is met on the second pass.
    for (let pass = 1; ; pass++) {
      try {
        const outcome = await db.transaction().execute(async (tx) => {
          const { locked, record } = await lockIdempotencyKey(tx, userId, key)
          if (!locked) throw keyInUse()
          const { replay } = decide(record, requestHash)
          if (replay !== null) return { replay, payload: undefined }
          const withTransaction = request as WithTransaction
          withTransaction[kTransaction] = tx
          let payload: unknown
          try {
            payload = await handler.call(this, request, reply)
          } finally {
            withTransaction[kTransaction] = null
          }
          const answer = answerOf(reply, payload)
          if (isKept(answer.status) && !await storeIdempotentAnswer(tx, { userId, key, requestHash, ...answer })) throw new LostRace()
          return { replay: null, payload }
        })
        return outcome.replay === null ? outcome.payload : replay(reply, outcome.replay)
      } catch (err) {
        if (!(err instanceof LostRace)) throw err
        if (pass === 2) throw keyInUse()
      }
    }
  }

  const underLease = (handler: Handler): Handler => async function (request, reply) {
    const key = request.headers['idempotency-key']
    if (typeof key !== 'string') return handler.call(this, request, reply)
    const userId = request.user.id
    const requestHash = requestFingerprint(request.method, request.routeOptions.url ?? '', request.body)
    const token = randomUUID()
    const claimed = await claimIdempotencyKey(db, { userId, key, requestHash, token, leaseMs })
    if (claimed === undefined) {
      const { replay: answer } = decide(await findIdempotencyRecord(db, userId, key), requestHash)
      // Free again by now (the holder failed, or its record was purged): the client's retry takes it.
      if (answer === null) throw keyInUse()
      return replay(reply, answer)
    }
    request.idempotentRequestId = createHash('sha256').update(`${userId}\n${key}\n${requestHash}\n${claimed.createdAt}`).digest('hex')
    const held = { userId, key, token }
    const release = () => releaseIdempotencyKey(db, held).catch((err: unknown) => {
      request.log.warn({ err }, 'idempotency key not released: it is free again when its lease ends')
    })
    let payload: unknown
    try {
      payload = await handler.call(this, request, reply)
    } catch (err) {
      await release()
      throw err
    }
    const answer = answerOf(reply, payload)
    if (!isKept(answer.status)) {
      await release()
      return payload
    }
    // The work is done: the answer goes out even if it cannot be kept. A retry then runs the
    // route again, and the provider answers its keyed calls with what it did the first time.
    const kept = await completeIdempotencyKey(db, { ...held, ...answer }).catch((err: unknown) => {
      request.log.warn({ err }, 'idempotent answer not kept')
      return true
    })
    if (!kept) request.log.warn('idempotency key taken over by another attempt after its lease ended: this answer is not kept')
    return payload
  }

  fastify.addHook('onRoute', (route: RouteOptions) => {
    const mode = route.config?.idempotent
    if (mode === undefined) return
    if (route.schema === undefined) throw new Error(`${String(route.method)} ${route.url}: an idempotent route needs a schema`)
    document(route.schema)
    const handler = route.handler as Handler
    route.handler = (mode === 'transaction' ? inTransaction(handler) : underLease(handler)) as RouteOptions['handler']
  })

  // Expired records count as absent already; the purge gives their space back and holds each
  // user to IDEMPOTENCY_KEYS_PER_USER. A job of the scheduler (jobs/scheduler.ts): every
  // instance runs it, and a purge run twice at once deletes nothing twice.
  fastify.jobs.purgeEvery('idempotency.purge', PURGE_INTERVAL_MS, () => purgeIdempotencyKeys(db, maxPerUser), { purged: 'idempotency keys purged', failed: 'purging idempotency keys failed' })
}, { name: 'idempotency', dependencies: ['db', 'authenticate', 'scheduler'] })
