// Two-step sign-in, end to end in Debian's Chromium (playwright-core): a web client page on
// APP_URL's origin signs in with a password, is answered the second factor's challenge (no
// token, no cookie yet), shows a code field, and the person types the code their authenticator
// app shows (computed here from the seed, as the app would). The API then sets its auth cookie
// in the browser, and the page reads who signed in with it. A used code typed again is refused.
//
// Part of `npm run test:integration`. It needs /usr/bin/chromium (`apt-get install chromium`), or CHROMIUM_PATH.
import { once } from 'node:events'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import { launchChromium } from '../support/chromium.js'
import { build, confirmAddress, uniqueEmail } from '../support/helper.js'
import { codeAt, midStep } from '../support/totp.js'
import { freePort } from './process.js'

/** The web client: a sign-in form, then, when the API asks, a code form; #result shows the outcome. */
function webClientPage (api: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Web client</title></head>
<body>
<form id="sign-in"><label>Email <input name="email" type="email"></label><label>Password <input name="password" type="password"></label><button>Sign in</button></form>
<form id="second-step" hidden><label>Code <input name="code" inputmode="numeric" autocomplete="one-time-code"></label><button>Verify</button></form>
<p><output id="result"></output></p>
<script type="module">
const api = ${JSON.stringify(api)}
const result = document.getElementById('result')
const show = (state, text) => { result.dataset.state = state; result.textContent = text }
let mfaToken = null
async function call (path, body) {
  const res = await fetch(api + path, { method: body ? 'POST' : 'GET', credentials: 'include', headers: body ? { 'content-type': 'application/json' } : {}, body: body ? JSON.stringify(body) : undefined })
  return { status: res.status, body: await res.json() }
}
async function signedIn () {
  const me = await call('/auth/me')
  show(me.status === 200 ? 'signed-in' : 'error', me.status === 200 ? me.body.data.email : 'me: ' + me.status)
}
document.getElementById('sign-in').addEventListener('submit', async (event) => {
  event.preventDefault()
  const form = new FormData(event.target)
  const { status, body } = await call('/auth/login', { email: form.get('email'), password: form.get('password') })
  if (status !== 200) return show('error', body.code)
  if (body.mfaRequired) {
    mfaToken = body.mfaToken
    document.getElementById('second-step').hidden = false
    return show('code-asked', body.methods.join(','))
  }
  await signedIn()
})
document.getElementById('second-step').addEventListener('submit', async (event) => {
  event.preventDefault()
  const { status, body } = await call('/auth/mfa', { mfaToken, code: new FormData(event.target).get('code') })
  if (status !== 200) return show('error', body.code)
  await signedIn()
})
</script>
</body></html>`
}

async function startWebClient (t: Test, api: string): Promise<string> {
  const page = webClientPage(api)
  const server = createServer((req, res) => {
    if (req.method !== 'GET' || req.url === '/favicon.ico') return res.writeHead(req.method === 'GET' ? 204 : 405).end()
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' }).end(page)
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => new Promise<void>((resolve) => {
    server.close(() => resolve())
    server.closeAllConnections()
  }))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

t.test('a browser signs in with a password, is asked for the code, types it, and is signed in by cookie', async (t) => {
  const apiPort = await freePort()
  const api = `http://127.0.0.1:${apiPort}`
  const app = await startWebClient(t, api)
  const server = await build(t, { API_URL: api, APP_URL: app })
  await server.listen({ port: apiPort, host: '127.0.0.1' })

  // The account, with two-step sign-in on, set up through the API.
  await midStep(5_000)
  const email = uniqueEmail('mfa-browser')
  const password = 'correct horse battery'
  const post = async (path: string, body: unknown, token?: string) => (await fetch(api + path, {
    method: 'POST', headers: { 'content-type': 'application/json', ...(token && { authorization: `Bearer ${token}` }) }, body: JSON.stringify(body)
  })).json() as Promise<Record<string, any>>
  const { token, user } = await post('/auth/register', { email, password })
  await confirmAddress(server, user.id)
  const { data: { secret } } = await post('/account/mfa/totp', { currentPassword: password }, token)
  t.equal((await post('/account/mfa/totp/confirm', { code: codeAt(secret, Date.now()) }, token)).success, true, 'two-step sign-in on')

  const { context, page } = await launchChromium(t, (url) => url.hostname === '127.0.0.1')
  const problems: string[] = []
  page.on('pageerror', (err) => { problems.push(`page error: ${err.message}`) })
  const result = page.locator('#result[data-state]')
  const outcome = async () => ({ state: await result.getAttribute('data-state'), text: await result.textContent() })

  async function signIn (code: string) {
    await page.goto(app)
    await page.getByLabel('Email').fill(email)
    await page.getByLabel('Password').fill(password)
    await page.getByRole('button', { name: 'Sign in' }).click()
    await page.locator('#result[data-state="code-asked"]').waitFor({ timeout: 15_000 })
    t.equal(await result.textContent(), 'totp,recovery', 'the API asked for the second factor')
    t.notOk((await context.cookies(api)).some((cookie) => cookie.name === 'auth_token'), 'no auth cookie before the code')
    await page.getByLabel('Code').fill(code)
    await page.getByRole('button', { name: 'Verify' }).click()
    await page.locator('#result[data-state="signed-in"], #result[data-state="error"]').waitFor({ timeout: 15_000 })
    return outcome()
  }

  const code = codeAt(secret, Date.now() + 30_000)
  t.same(await signIn(code), { state: 'signed-in', text: email }, 'the page shows who signed in, read with the cookie', { problems })
  const cookie = (await context.cookies(api)).find((c) => c.name === 'auth_token')
  t.match(cookie, { httpOnly: true, sameSite: 'Lax' }, 'the API set its auth cookie after the code')

  await context.clearCookies()
  t.same(await signIn(code), { state: 'error', text: 'MFA_CODE_INVALID' }, 'the same code typed again, in a new sign-in: refused')
  t.same(problems, [], 'no script error, nothing refused by CORS')
})
