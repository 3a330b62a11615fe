// npm run stripe:dev with the service, as docs/billing.md tells a newcomer to try billing: the
// settings it prints given to the compiled server, a checkout paid through the stand-in's hosted
// page (its button sends the signed webhook), then cancelled in its billing portal page.
import t from 'tap'
import { testDatabaseEnv, TEST_SECRET, uniqueEmail } from '../support/helper.js'
import { startDevTool } from './dev-tool.js'
import { freePort, startServer, waitUntilUp } from './process.js'

/** The `NAME=value` lines of the tool's output that name a setting. */
const printedSettings = (output: string) => Object.fromEntries(output.split('\n')
  .filter((line) => /^PAYMENT_[A-Z_]+=\S+$/.test(line)).map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]))

t.test('a checkout paid on the stand-in\'s page makes the subscription active; its portal page cancels it', async (t) => {
  const apiPort = await freePort()
  const stripe = startDevTool(t, 'stripe-dev', ['--port', '0', '--webhook-url', `http://127.0.0.1:${apiPort}/webhooks/payment`])
  await stripe.waitFor(/^PAYMENT_PRICE_IDS=.+$/m)
  const settings = printedSettings(stripe.output())
  t.same(Object.keys(settings).sort(), ['PAYMENT_API_URL', 'PAYMENT_PRICE_IDS', 'PAYMENT_SECRET_KEY', 'PAYMENT_WEBHOOK_SECRET'], 'it prints the four settings')

  const server = startServer({ PORT: String(apiPort), AUTH_JWT_SECRET: TEST_SECRET, BCRYPT_ROUNDS: '4', ...await testDatabaseEnv(t), ...settings })
  t.teardown(() => { server.child.kill('SIGKILL') })
  await waitUntilUp(server)
  const api = async (method: string, path: string, token?: string, body?: unknown) => {
    const res = await fetch(`${server.base}${path}`, {
      method,
      headers: { ...(body !== undefined && { 'content-type': 'application/json' }), ...(token !== undefined && { authorization: `Bearer ${token}` }) },
      ...(body !== undefined && { body: JSON.stringify(body) })
    })
    return { status: res.status, body: await res.json() as Record<string, any> }
  }
  const registered = await api('POST', '/auth/register', undefined, { email: uniqueEmail('stripe-dev'), password: 'correct horse battery' })
  t.equal(registered.status, 201)
  const token: string = registered.body.token

  const priceId = settings.PAYMENT_PRICE_IDS!.split(',')[0]!
  const checkout = await api('POST', '/checkout', token, { priceId })
  t.equal(checkout.status, 200)
  const checkoutUrl: string = checkout.body.data.url
  t.ok(checkoutUrl.startsWith(`${settings.PAYMENT_API_URL}/`), 'the checkout URL is a page of the stand-in')

  const form = await (await fetch(checkoutUrl)).text()
  const action = /<form method="post" action="([^"]+)"><button>Complete payment<\/button>/.exec(form)?.[1]
  t.ok(action, 'the page has the "Complete payment" button', { form })
  const paid = await fetch(new URL(action!, checkoutUrl), { method: 'POST' })
  t.equal(paid.status, 200, 'after the button, the page again (303)')
  t.equal(paid.url, checkoutUrl)
  const paidPage = await paid.text()
  t.match(paidPage, /<h1>Payment complete<\/h1>/)
  t.match(paidPage, /<code>checkout\.session\.completed<\/code>.*?<td class="status">200<\/td>/s, 'the signed event delivered, answered 200')
  t.match(stripe.output(), /^webhook checkout\.session\.completed evt_\w+ -> 200$/m, 'and a line in its log')
  t.match(stripe.output(), /^webhook invoice\.payment_succeeded evt_\w+ -> 200$/m)

  const active = await api('GET', '/subscription', token)
  t.match(active.body.data, { plan: 'pro', status: 'active', priceId, cancelAtPeriodEnd: false }, 'the service has the subscription active')
  t.equal(await api('POST', '/checkout', token, { priceId }).then((r) => r.status), 409, 'and a second checkout is refused')

  const portal = await api('POST', '/billing-portal', token)
  t.equal(portal.status, 200)
  const portalUrl: string = portal.body.data.url
  t.ok(portalUrl.startsWith(`${settings.PAYMENT_API_URL}/`), 'the portal URL is a page of the stand-in')
  const portalPage = await (await fetch(portalUrl)).text()
  const subscriptionId = /<input type="hidden" name="subscription" value="([^"]+)">/.exec(portalPage)?.[1]
  t.equal(subscriptionId, active.body.data.subscriptionId, 'the portal lists the subscription')
  t.match(portalPage, /<button name="when" value="period_end">Cancel at period end<\/button>/)
  const cancelled = await fetch(portalUrl, {
    method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ subscription: subscriptionId!, when: 'period_end' })
  })
  t.match(await cancelled.text(), /<code>customer\.subscription\.updated<\/code>.*?<td class="status">200<\/td>/s)
  t.match((await api('GET', '/subscription', token)).body.data, { plan: 'pro', status: 'active', cancelAtPeriodEnd: true }, 'cancelled at the period\'s end')
})
