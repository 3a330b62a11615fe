// The provider calls a webhook decided on, carried out after the decision commits: no
// provider call runs inside a database transaction, so a slow provider holds no connection
// (on the embedded database, the only one) and the webhook is answered once its event is
// recorded. Actions are queued in the webhook's transaction (db/billing.ts); this worker
// claims one due action at a time under a lease (several instances share the table without
// calling twice), calls the provider outside any transaction, then marks it done or
// schedules a retry with exponential backoff. It gives up on a refusal the provider means
// for good, or GIVE_UP_MS after the action was queued, with an error line and the
// billing_provider_actions{state="failed"} gauge for the operator (docs/billing.md).
import type { Kysely } from 'kysely'
import {
  claimDueProviderAction, markProviderActionDone, markProviderActionFailed, msUntilNextProviderAction,
  purgeProviderActions, scheduleProviderActionRetry, type ClaimedProviderAction
} from '../db/billing.js'
import type { Database } from '../db/types.js'
import { detached } from '../jobs/scheduler.js'
import { providerFailureOf, type BillingLog, type PaymentProvider } from './provider.js'

/**
 * Long enough to ride out a provider outage or a key being fixed over a weekend; short of the
 * 30 days before a subscription cancelled by mistake renews, so an operator told at the
 * give-up still has weeks to cancel it by hand before it bills again.
 */
export const GIVE_UP_MS = 7 * 86_400_000
const MAX_RETRY_DELAY_MS = 60 * 60_000
/** How often a worker looks for due actions (ones another instance queued, retries) when nothing wakes it sooner. */
const POLL_INTERVAL_MS = 30_000
const HOUSEKEEPING_INTERVAL_MS = 10 * 60_000
/** At most this many actions in one pass; the next pass follows at once. */
const PASS_LIMIT = 50
/** On stop, a provider call in flight gets this long to finish; after that its lease runs out and another attempt follows. */
const STOP_WAIT_MS = 3_000

export interface ProviderActionWorker {
  /** Begins: a pass now, then one whenever woken or due. */
  start: () => void
  /**
   * One pass over the due actions, after any pass in flight; resolves with how many were
   * attempted. What tests call instead of waiting.
   */
  /** Its name among the scheduler's jobs (jobs/scheduler.ts), which starts and stops it. */
  readonly name: string
  runOnce: () => Promise<number>
  /** After a commit that queued an action: a pass on the next turn of the event loop. */
  wake: () => void
  /** No pass after this one; waits a little for a provider call in flight. */
  stop: () => Promise<void>
}

export interface ProviderActionWorkerOptions {
  db: Kysely<Database>
  provider: PaymentProvider
  log: BillingLog
  /** The first retry's delay; each next one doubles, up to an hour. */
  retryBaseMs: number
  /** How long one claimed action may take before another worker may take it over. */
  leaseMs: number
}

const clip = (text: string): string => text.length <= 500 ? text : `${text.slice(0, 500)}…`

export function createProviderActionWorker ({ db, provider, log, retryBaseMs, leaseMs }: ProviderActionWorkerOptions): ProviderActionWorker {
  let started = false
  let stopped = false
  let chain: Promise<unknown> = Promise.resolve()
  let wakeQueued = false
  let timer: NodeJS.Timeout | undefined
  let lastHousekeeping = 0

  const attempt = async (action: ClaimedProviderAction): Promise<void> => {
    const context = { actionId: action.id, kind: action.kind, reason: action.reason, subscriptionId: action.subscriptionId, userId: action.userId, attempts: action.attempts }
    let result: string
    try {
      // One key per action: a retry is the same request.
      result = await provider.cancelNow(action.subscriptionId, { idempotencyKey: `billing-action-${action.id}` })
    } catch (err) {
      const failure = providerFailureOf(err)
      const error = clip(failure?.detail ?? String((err as Error)?.message ?? err))
      const age = Date.now() - Date.parse(action.createdAt)
      if (failure?.refused === true || age >= GIVE_UP_MS) {
        await markProviderActionFailed(db, action.id, error)
        log.error({ ...context, error }, 'billing provider action given up: an operator must carry it out at the provider')
        return
      }
      const delay = Math.min(retryBaseMs * 2 ** Math.min(action.attempts - 1, 30), MAX_RETRY_DELAY_MS)
      await scheduleProviderActionRetry(db, action.id, delay, error)
      log.warn({ ...context, error, retryInMs: delay }, 'billing provider action failed: will retry')
      return
    }
    await markProviderActionDone(db, action.id)
    log.info({ ...context, result }, 'billing provider action done')
  }

  const pass = async (): Promise<number> => {
    if (stopped) return 0
    try {
      provider.ensureConfigured()
    } catch {
      return 0 // billing is off: actions wait (the gauge shows them)
    }
    let attempted = 0
    for (; attempted < PASS_LIMIT; attempted++) {
      if (stopped) break
      const action = await claimDueProviderAction(db, leaseMs)
      if (action === undefined) break
      await attempt(action)
    }
    if (attempted === PASS_LIMIT) wake()
    if (Date.now() - lastHousekeeping >= HOUSEKEEPING_INTERVAL_MS) {
      lastHousekeeping = Date.now()
      await purgeProviderActions(db)
    }
    return attempted
  }

  const runOnce = (): Promise<number> => {
    const run = chain.then(pass)
    chain = run.catch(() => {})
    return run
  }

  // In the background: after a pass, the next one when the soonest waiting action is due.
  const scheduleNext = async (): Promise<void> => {
    if (stopped || !started) return
    let wait = POLL_INTERVAL_MS
    try {
      const due = await msUntilNextProviderAction(db)
      if (due !== null) wait = Math.min(Math.max(due, 10), POLL_INTERVAL_MS)
    } catch {
      // The database did not answer: the next poll tries again.
    }
    if (stopped) return
    clearTimeout(timer)
    timer = setTimeout(wake, wait).unref()
  }

  function wake (): void {
    if (stopped || !started || wakeQueued) return
    wakeQueued = true
    // On a later turn: the embedded database runs its queries on this thread, so starting
    // now would delay the answer of the request that queued the action. Outside its trace:
    // this pass and the timers after it are no part of the webhook that woke the worker.
    detached(() => setImmediate(() => {
      wakeQueued = false
      clearTimeout(timer)
      runOnce()
        .catch((err: unknown) => { log.error({ err }, 'billing provider actions: pass failed, trying again at the next poll') })
        .finally(() => { scheduleNext().catch(() => {}) })
    }))
  }

  return {
    name: 'billing.provider-actions',
    start () {
      if (started || stopped) return
      started = true
      wake()
    },
    runOnce,
    wake,
    async stop () {
      stopped = true
      clearTimeout(timer)
      let waited: NodeJS.Timeout | undefined
      await Promise.race([chain, new Promise((resolve) => { waited = setTimeout(resolve, STOP_WAIT_MS) })])
      clearTimeout(waited)
    }
  }
}
