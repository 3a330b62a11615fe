// Stripe's hosted pages, served by the stand-in when asked (npm run stripe:dev): the checkout
// page a payer completes and the billing portal where a subscription is cancelled. A button
// changes the stand-in's state as Stripe would, then delivers the events Stripe sends for it to
// the service's webhook, signed with its secret, and the page shows what the webhook answered.
import type { IncomingMessage, ServerResponse } from 'node:http'
import {
  checkoutSessionCompleted, invoicePaymentSucceeded, signedDelivery, subscriptionDeleted, subscriptionUpdated, type StripeEventLike
} from '../stripe-events.js'
import type { PageHandler } from './http.js'

type Obj = Record<string, any>

export interface HostedPagesOptions {
  /** The service's webhook route, e.g. http://127.0.0.1:3002/webhooks/payment. */
  webhookUrl: string
  /** The service's PAYMENT_WEBHOOK_SECRET: every delivery is signed with it. */
  webhookSecret: string
  /** Told of every delivery, as it is answered. */
  onDelivery?: (delivery: Delivery) => void
}

/** One event sent to the webhook: its answer (`status` null when the service could not be reached). */
export interface Delivery {
  eventId: string
  type: string
  /** The checkout session or subscription it is about. */
  about: string
  status: number | null
  answer: string
}

/** What the pages do to the stand-in's state (its own functions, as the API's routes use them). */
export interface HostedActions {
  checkoutSession: (id: string) => Obj | undefined
  /** Throws when the session cannot be paid (not open, its customer deleted). */
  completeCheckout: (id: string) => { session: Obj, subscription: Obj }
  /** The portal session whose URL has this path. */
  portalSession: (path: string) => Obj | undefined
  customer: (id: string) => Obj | undefined
  subscriptionsOf: (customerId: string) => Obj[]
  /** The portal's default cancellation: the subscription runs to its period's end. `previous`: the fields it changed, as they were. */
  cancelAtPeriodEnd: (subscriptionId: string) => { subscription: Obj, previous: Obj }
  /** Ends the subscription now. */
  cancelNow: (subscriptionId: string) => Obj
}

const LIVE = new Set(['active', 'trialing', 'past_due', 'incomplete', 'unpaid'])
const HTML_ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }
const esc = (value: unknown) => String(value ?? '').replace(/[&<>"']/g, (c) => HTML_ESCAPES[c]!)
const money = (cents: number, currency: string) => `${(cents / 100).toFixed(2)} ${currency.toUpperCase()}`
const day = (unixSeconds: number) => new Date(unixSeconds * 1000).toISOString().slice(0, 10)

function page (title: string, body: string): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${esc(title)} · Stripe stand-in</title>
<style>body{font:15px/1.5 system-ui,sans-serif;max-width:44rem;margin:2rem auto;padding:0 1rem;color:#1a1f36}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #e3e8ee;padding:.3rem .5rem;text-align:left;vertical-align:top}
button{font:inherit;padding:.5rem 1rem;margin:.2rem .4rem .2rem 0;border:0;border-radius:6px;background:#635bff;color:#fff;cursor:pointer}
button.danger{background:#c0123c}code,pre{font-size:13px;white-space:pre-wrap;word-break:break-all}small{color:#697386}</style></head>
<body><h1>${esc(title)}</h1>${body}<p><small>The project's Stripe stand-in (npm run stripe:dev): no card, no account; <a href="/">every webhook delivery</a>.</small></p></body></html>`
}

function deliveryTable (deliveries: Delivery[]): string {
  if (deliveries.length === 0) return '<p>No webhook event sent yet.</p>'
  const rows = deliveries.map((d) => `<tr><td><code>${esc(d.type)}</code><br><small>${esc(d.eventId)}</small></td>` +
    `<td class="status">${d.status === null ? 'not delivered' : esc(d.status)}</td><td><code>${esc(d.answer)}</code></td>` +
    `<td><form method="post" action="/events/${esc(d.eventId)}/resend"><button>Send again</button></form></td></tr>`).join('')
  return `<table><tr><th>Event sent to the webhook</th><th>Answer</th><th></th><th></th></tr>${rows}</table>`
}

async function readForm (req: IncomingMessage): Promise<URLSearchParams> {
  const chunks: Buffer[] = []
  for await (const chunk of req) chunks.push(chunk as Buffer)
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'))
}

function send (res: ServerResponse, status: number, html: string): void {
  res.writeHead(status, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' })
  res.end(html)
}

/** After a button: back to the page it was on, which shows the deliveries (a reload sends nothing twice). */
function seeOther (res: ServerResponse, location: string): void {
  res.writeHead(303, { location })
  res.end()
}

export function hostedPages (actions: HostedActions, options: HostedPagesOptions): PageHandler {
  const deliveries: Delivery[] = []
  const sent = new Map<string, { event: StripeEventLike, about: string }>()

  async function deliver (event: StripeEventLike, about: string): Promise<Delivery> {
    sent.set(event.id, { event, about })
    // Signed now, as Stripe signs each attempt: a resend is not refused as too old.
    const { body, headers } = signedDelivery(event, options.webhookSecret)
    let delivery: Delivery
    try {
      const answer = await fetch(options.webhookUrl, { method: 'POST', headers, body, signal: AbortSignal.timeout(15_000) })
      delivery = { eventId: event.id, type: event.type, about, status: answer.status, answer: (await answer.text()).slice(0, 500) }
    } catch (err) {
      const cause = (err as { cause?: { message?: string } }).cause?.message ?? (err as Error).message
      delivery = { eventId: event.id, type: event.type, about, status: null, answer: `${cause} (is the service running at ${options.webhookUrl}?)` }
    }
    deliveries.push(delivery)
    options.onDelivery?.(delivery)
    return delivery
  }

  function checkoutPage (session: Obj): string {
    const mine = deliveries.filter((d) => d.about === session.id)
    const email = session.customer ? actions.customer(session.customer)?.email : null
    const head = `<p>${esc(money(session.amount_total, session.currency))} a month${email ? ` for <b>${esc(email)}</b>` : ''}</p>`
    if (session.status === 'open') {
      const back = session.cancel_url ? ` <a href="${esc(session.cancel_url)}">Back (cancel)</a>` : ''
      return page('Checkout', `${head}<form method="post" action="/c/pay/${esc(session.id)}"><button>Complete payment</button>${back}</form>${deliveryTable(mine)}`)
    }
    const next = session.status === 'complete' && session.success_url ? `<p><a href="${esc(session.success_url)}">Continue to ${esc(session.success_url)}</a></p>` : ''
    return page(session.status === 'complete' ? 'Payment complete' : `Checkout ${session.status}`, `${head}${next}${deliveryTable(mine)}`)
  }

  function portalPage (portal: Obj): string {
    const subscriptions = actions.subscriptionsOf(portal.customer)
    const ids = new Set(subscriptions.map((s) => s.id))
    const rows = subscriptions.map((s) => {
      const item = s.items.data[0] ?? {}
      const state = s.cancel_at_period_end ? `${s.status}, ends ${day(s.cancel_at)}` : s.status
      const buttons = LIVE.has(s.status)
        ? `<form method="post"><input type="hidden" name="subscription" value="${esc(s.id)}">` +
          (s.cancel_at_period_end ? '' : '<button name="when" value="period_end">Cancel at period end</button>') +
          '<button class="danger" name="when" value="now">Cancel now</button></form>'
        : ''
      return `<tr><td><code>${esc(item.price?.id)}</code><br><small>${esc(s.id)}</small></td><td>${esc(state)}</td><td>${item.current_period_end ? esc(day(item.current_period_end)) : ''}</td><td>${buttons}</td></tr>`
    }).join('')
    const table = rows === '' ? '<p>No subscription.</p>' : `<table><tr><th>Price</th><th>Status</th><th>Period end</th><th></th></tr>${rows}</table>`
    const back = portal.return_url ? `<p><a href="${esc(portal.return_url)}">Return to ${esc(portal.return_url)}</a></p>` : ''
    const email = actions.customer(portal.customer)?.email
    return page('Billing portal', `<p>${esc(email ?? portal.customer)}</p>${table}${back}${deliveryTable(deliveries.filter((d) => ids.has(d.about)))}`)
  }

  async function handle (req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { pathname } = new URL(req.url ?? '/', 'http://stand-in.invalid')
    const method = req.method ?? 'GET'
    const checkout = /^\/c\/pay\/([^/]+)$/.exec(pathname)
    const resend = /^\/events\/([^/]+)\/resend$/.exec(pathname)
    if (pathname === '/' && method === 'GET') {
      send(res, 200, page('Webhook deliveries', `<p>To <code>${esc(options.webhookUrl)}</code>, newest first.</p>${deliveryTable(deliveries.toReversed())}`))
    } else if (checkout) {
      const session = actions.checkoutSession(decodeURIComponent(checkout[1]!))
      if (!session) return send(res, 404, page('No such checkout session', ''))
      if (method !== 'POST') return send(res, 200, checkoutPage(session))
      let paid: { session: Obj, subscription: Obj }
      try {
        paid = actions.completeCheckout(session.id)
      } catch (err) {
        return send(res, 409, page('This checkout cannot be paid', `<p>${esc((err as Error).message)}</p>`))
      }
      // The two of the events Stripe sends for a paid subscription checkout that the service handles.
      await deliver(checkoutSessionCompleted(paid.session), session.id)
      await deliver(invoicePaymentSucceeded(paid.subscription, { billingReason: 'subscription_create', customerEmail: paid.session.customer_details?.email }), session.id)
      seeOther(res, pathname)
    } else if (pathname.startsWith('/p/session/')) {
      const portal = actions.portalSession(pathname)
      if (!portal) return send(res, 404, page('No such billing portal session', ''))
      if (method !== 'POST') return send(res, 200, portalPage(portal))
      const form = await readForm(req)
      const id = form.get('subscription') ?? ''
      if (!actions.subscriptionsOf(portal.customer).some((s) => s.id === id && LIVE.has(s.status))) {
        return send(res, 409, page('Nothing to cancel', `<p>No live subscription ${esc(id)} of this customer.</p>`))
      }
      if (form.get('when') === 'now') {
        await deliver(subscriptionDeleted(actions.cancelNow(id)), id)
      } else {
        const { subscription, previous } = actions.cancelAtPeriodEnd(id)
        await deliver(subscriptionUpdated(subscription, { previousAttributes: previous }), id)
      }
      seeOther(res, pathname)
    } else if (resend && method === 'POST') {
      const earlier = sent.get(decodeURIComponent(resend[1]!))
      if (!earlier) return send(res, 404, page('No such event', ''))
      const delivery = await deliver(earlier.event, earlier.about)
      send(res, 200, page('Sent again', deliveryTable([delivery])))
    } else {
      send(res, 404, page('Not found', '<p>The stand-in serves its checkout pages at <code>/c/pay/…</code> and its billing portal at <code>/p/session/…</code>.</p>'))
    }
  }
  return handle
}
