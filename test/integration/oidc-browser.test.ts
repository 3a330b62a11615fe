// Sign-in with an OpenID Connect provider, end to end in Debian's Chromium (playwright-core):
// a web client page on APP_URL's origin links to the API's start route, the browser follows
// every redirect through the test provider's sign-in form and back, and the page exchanges the
// one-time code for a token (the auth cookie set for the API) and shows who signed in. Then
// the same person comes back: signed in to the same account, no second one created.
//
// Part of `npm run test:integration`. It needs /usr/bin/chromium (`apt-get install chromium`), or CHROMIUM_PATH.
import { once } from 'node:events'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { BrowserContext, Page } from 'playwright-core'
import t, { type Test } from 'tap'
import { launchChromium } from '../support/chromium.js'
import { build, uniqueEmail } from '../support/helper.js'
import { startOidcProvider } from '../support/oidc-provider.js'
import { freePort } from './process.js'

const PROVIDER_ID = 'test'
const CLIENT = { clientId: 'task-app-browser', clientSecret: 'a-client-secret-for-the-browser-test' }

/**
 * The web client: one page for every path. Its link starts a provider sign-in that returns to
 * /signed-in; there, its script exchanges `?signin=` for a token (the API sets its cookie too),
 * asks GET /auth/me with the token, and writes the email in #result (or the error).
 */
function webClientPage (api: string, app: string): string {
  const start = `${api}/auth/providers/${PROVIDER_ID}/start?returnTo=${encodeURIComponent(`${app}/signed-in`)}`
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Web client</title></head>
<body>
<a id="sign-in" href="${start.replaceAll('&', '&amp;')}">Sign in with Test</a>
<p><output id="result"></output></p>
<script type="module">
const api = ${JSON.stringify(api)}
const query = new URLSearchParams(location.search)
const result = document.getElementById('result')
const show = (state, text, userId = '') => {
  result.dataset.userId = userId
  result.dataset.state = state
  result.textContent = text
}
async function call (url, init) {
  const res = await fetch(url, init)
  const body = await res.json()
  if (!res.ok) throw new Error(url + ': ' + res.status + ' ' + (body.code ?? ''))
  return body
}
if (query.has('error')) {
  show('error', query.get('error'))
} else if (query.has('signin')) {
  try {
    const signedIn = await call(api + '/auth/providers/exchange', {
      method: 'POST',
      credentials: 'include',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ code: query.get('signin') })
    })
    const me = await call(api + '/auth/me', { headers: { authorization: 'Bearer ' + signedIn.token } })
    show('signed-in', me.data.email, me.data.id)
  } catch (error) {
    show('error', String(error && error.message ? error.message : error))
  }
}
</script>
</body></html>`
}

/** The web client on a port of its own; its origin is APP_URL. The API's URL is known before the API listens. */
async function startWebClient (t: Test, api: string): Promise<string> {
  let page = ''
  const server = createServer((req, res) => {
    if (req.method !== 'GET' || req.url === '/favicon.ico') {
      res.writeHead(req.method === 'GET' ? 204 : 405).end()
      return
    }
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' }).end(page)
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const app = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  page = webClientPage(api, app)
  t.teardown(() => new Promise<void>((resolve) => {
    server.close(() => resolve())
    server.closeAllConnections()
  }))
  return app
}

/** Offline: everything here is on 127.0.0.1. */
const launch = (t: Test): Promise<{ context: BrowserContext, page: Page }> => launchChromium(t, (url) => url.hostname === '127.0.0.1')

/** Waits until the tab is at a URL `arrived` accepts; a failure names where the browser stopped and what it showed. */
async function arrive (page: Page, arrived: (url: URL) => boolean, what: string): Promise<void> {
  try {
    await page.waitForURL(arrived, { timeout: 15_000 })
  } catch {
    const shown = await page.locator('body').innerText().catch(() => '')
    throw new Error(`the browser never reached ${what}: it stopped at ${page.url()} showing ${JSON.stringify(shown.slice(0, 300))}`)
  }
}

t.test('a browser signs in through the provider, lands signed in, and signs in again as the same user', async (t) => {
  const subject = 'browser-user-1'
  const email = uniqueEmail('oidc-browser')

  const apiPort = await freePort()
  const api = `http://127.0.0.1:${apiPort}`
  const app = await startWebClient(t, api)
  const idp = await startOidcProvider(t, {
    clients: [{ ...CLIENT, redirectUris: [`${api}/auth/providers/${PROVIDER_ID}/callback`] }],
    accounts: [{ subject, email, emailVerified: true, name: 'Browser User' }]
  })
  const server = await build(t, {
    API_URL: api,
    APP_URL: app,
    OIDC_PROVIDERS: PROVIDER_ID,
    OIDC_TEST_ISSUER: idp.issuer,
    OIDC_TEST_CLIENT_ID: CLIENT.clientId,
    OIDC_TEST_CLIENT_SECRET: CLIENT.clientSecret,
    OIDC_TEST_NAME: 'Test'
  })
  await server.listen({ port: apiPort, host: '127.0.0.1' })
  const providers = await (await fetch(`${api}/auth/providers`)).json() as { data?: Array<{ id: string, name: string }> }
  t.same(providers.data, [{ id: PROVIDER_ID, name: 'Test' }], 'the API lists the provider')

  const { context, page } = await launch(t)
  const problems: string[] = []
  page.on('pageerror', (err) => { problems.push(`page error: ${err.message}`) })
  page.on('console', (message) => { if (message.type() === 'error') problems.push(`console (${page.url()}): ${message.text()}`) })
  // Every page the browser loaded in its tab, redirects included.
  const navigations: string[] = []
  page.on('request', (request) => {
    if (request.isNavigationRequest() && request.frame() === page.mainFrame()) navigations.push(`${request.method()} ${request.url()}`)
  })

  const userCount = async () => Number((await server.db.selectFrom('users').select((eb) => eb.fn.countAll().as('n')).executeTakeFirstOrThrow()).n)
  const accountsBefore = await userCount()

  /** From the web client's home page: click the link, sign in at the provider if it asks, and read #result. */
  async function signIn (): Promise<{ state: string, text: string, userId: string, askedForSubject: boolean }> {
    navigations.length = 0
    await page.goto(app)
    await page.getByRole('link', { name: 'Sign in with Test' }).click()
    // The provider asks who you are unless its own session remembers you.
    await arrive(page, (url) => url.origin === app || (url.origin === idp.issuer && url.pathname.startsWith('/interaction/')), 'the provider\'s sign-in form or the web client')
    const askedForSubject = new URL(page.url()).origin === idp.issuer
    if (askedForSubject) {
      await page.getByLabel('Subject').fill(subject)
      await page.getByRole('button', { name: 'Sign in' }).click()
    }
    await arrive(page, (url) => url.origin === app && url.pathname === '/signed-in', `${app}/signed-in`)
    const result = page.locator('#result[data-state]')
    await result.waitFor({ timeout: 15_000 })
    return {
      state: await result.getAttribute('data-state') ?? '',
      text: await result.textContent() ?? '',
      userId: await result.getAttribute('data-user-id') ?? '',
      askedForSubject
    }
  }

  const first = await signIn()
  t.same({ state: first.state, text: first.text }, { state: 'signed-in', text: email }, 'the page shows the signed-in email', { problems, navigations })
  t.ok(first.askedForSubject, 'the provider asked who was signing in, in its form')
  const landed = new URL(page.url())
  t.equal(`${landed.origin}${landed.pathname}`, `${app}/signed-in`, 'the browser landed on the web client\'s returnTo')
  t.ok(landed.searchParams.get('signin'), 'with the one-time code')
  const passedThrough = (method: string, url: string) => navigations.some((hop) => hop.startsWith(`${method} ${url}`))
  t.ok(passedThrough('GET', `${api}/auth/providers/${PROVIDER_ID}/start?`), 'through the API\'s start route', { navigations })
  t.ok(passedThrough('GET', `${idp.issuer}/auth?`), 'to the provider\'s authorization endpoint', { navigations })
  t.ok(passedThrough('POST', `${idp.issuer}/interaction/`), 'where the form was posted', { navigations })
  t.ok(passedThrough('GET', `${api}/auth/providers/${PROVIDER_ID}/callback?`), 'back through the API\'s callback', { navigations })

  const cookies = await context.cookies(api)
  const authCookie = cookies.find((cookie) => cookie.name === 'auth_token')
  t.match(authCookie, { domain: '127.0.0.1', path: '/', httpOnly: true, sameSite: 'Lax' }, 'the exchange set the API\'s auth_token cookie in the browser', { cookies: cookies.map((c) => c.name) })
  const byCookie = await fetch(`${api}/auth/me`, { headers: { cookie: `auth_token=${authCookie?.value ?? ''}` } })
  t.equal(byCookie.status, 200, 'the cookie authenticates')
  t.match(await byCookie.json(), { data: { id: first.userId, email } }, 'as the user who signed in')
  t.equal(await userCount(), accountsBefore + 1, 'a first sign-in created the account')

  // A returning user: the same subject, the same account.
  const again = await signIn()
  t.match(again, { state: 'signed-in', text: email, userId: first.userId }, 'a second sign-in signs in the same user', { problems, navigations })
  t.comment(again.askedForSubject ? 'the provider asked again' : 'the provider remembered its session')
  t.equal(await userCount(), accountsBefore + 1, 'and creates no other account')
  const identities = await server.db.selectFrom('user_identities').select(['user_id', 'provider'])
    .where('issuer', '=', idp.issuer).where('subject', '=', subject).execute()
  t.same(identities, [{ user_id: first.userId, provider: PROVIDER_ID }], 'one identity, linked to that user')

  t.same(problems, [], 'no script error, nothing refused by CORS')
})
