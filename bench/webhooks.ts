// Signed `invoice.payment_succeeded` deliveries for the webhook scenario: one event per
// request (each with its own id, so none is a redelivery), for seeded customers in turn,
// signed with the test helper's signedDelivery. Built ahead of the run so signing does not
// load the load generator; if a run outlasts the pool, the rest are signed on the fly.
import { invoicePaymentSucceeded, signedDelivery } from '../test/support/stripe-events.js'
import { customerIdOf, PRICE_ID, subscriptionIdOf } from './seed.js'

export const WEBHOOK_SECRET = 'whsec_bench'

export interface Delivery { body: string, headers: Record<string, string> }

export class DeliveryPool {
  private readonly templates: Array<{ body: string, id: string }> = []
  private readonly pool: Delivery[] = []
  private next = 0
  private serial = 0
  /** Deliveries signed during the run because the pool ran out. */
  signedLate = 0

  constructor (customers: number, private readonly runTag: string) {
    const now = Math.floor(Date.now() / 1000)
    for (let n = 1; n <= customers; n++) {
      const subscription = {
        id: subscriptionIdOf(n),
        object: 'subscription',
        customer: customerIdOf(n),
        currency: 'usd',
        metadata: {},
        items: { data: [{ id: `si_bench_${n}`, price: { id: PRICE_ID, product: 'prod_bench', unit_amount: 1200, currency: 'usd' }, quantity: 1, current_period_start: now - 10 * 86_400, current_period_end: now + 20 * 86_400 }] }
      }
      // One `created` for all: none is older than the state another one stored.
      const event = invoicePaymentSucceeded(subscription, { created: now, periodEnd: now + 50 * 86_400 })
      this.templates.push({ body: JSON.stringify(event, null, 2), id: event.id })
    }
  }

  private make (): Delivery {
    const serial = this.serial++
    const template = this.templates[serial % this.templates.length]!
    const body = template.body.replace(template.id, `evt_bench_${this.runTag}_${serial}`)
    return signedDelivery(null, WEBHOOK_SECRET, { body })
  }

  /** Signs `count` more deliveries now (timestamps must stay within the 300 s tolerance). */
  prepare (count: number): void {
    this.pool.length = 0
    this.next = 0
    for (let i = 0; i < count; i++) this.pool.push(this.make())
  }

  take (): Delivery {
    const delivery = this.pool[this.next]
    if (delivery !== undefined) {
      this.pool[this.next++] = undefined as unknown as Delivery
      return delivery
    }
    this.signedLate++
    return this.make()
  }
}
