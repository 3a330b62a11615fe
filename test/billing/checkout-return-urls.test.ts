// Return URLs a checkout body names: only on our own origins, and a URL that the schema's
// `uri` format accepts but a browser's URL parser refuses is a 400 like any other foreign
// one (it was a 500), with nothing asked of the provider.
import t from 'tap'
import { billingSetup, PRICE } from '../support/billing-setup.js'
import { json, registerUser } from '../support/helper.js'

const { app, stripe } = await billingSetup(t)

t.test('a return URL that does not parse, or looks like ours but is not, is a 400', async (t) => {
  const user = await registerUser(app)
  for (const url of ['http://localhost:3000.evil.example/', 'http://localhost:3000:80/', 'http://localhost:3000@evil.example/', 'https://localhost:3000/']) {
    for (const field of ['successUrl', 'cancelUrl']) {
      const calls = stripe.calls.length
      const res = await app.inject({ method: 'POST', url: '/checkout', headers: user.auth, payload: { priceId: PRICE, [field]: url } })
      t.equal(res.statusCode, 400, `${field}: ${url}`)
      t.same(json(res), { success: false, error: 'Validation failed', code: 'VALIDATION_FAILED', details: [`Must be a URL on APP_URL or CORS_ORIGINS - ${field}`] }, `${field}: ${url}`)
      t.equal(stripe.calls.length, calls, 'nothing asked of the provider')
    }
  }
  const own = await app.inject({ method: 'POST', url: '/checkout', headers: user.auth, payload: { priceId: PRICE, successUrl: 'http://localhost:3000/done' } })
  t.equal(own.statusCode, 200, 'our own origin is accepted')
})
