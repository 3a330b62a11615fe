// Passkeys, end to end in Debian's Chromium (playwright-core) with the DevTools protocol's
// virtual authenticator (WebAuthn.addVirtualAuthenticator): a web client page on APP_URL's
// origin registers a passkey (navigator.credentials.create), signs in with it alone past TOTP,
// uses it with presence only as the second factor (refused alone), and removes it. The attacks
// use the same browser: an assertion made on another origin, a signature altered on its way, a
// challenge answered twice, and a device-bound credential put back with an older counter (a
// clone). The hosts are `localhost` (an IP address cannot be a relying party id); the API and the
// page are on two ports of it, one site, so the API's auth cookie works as in production.
//
// Part of `npm run test:integration`. It needs /usr/bin/chromium (`apt-get install chromium`), or CHROMIUM_PATH.
import { once } from 'node:events'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { CDPSession, Page } from 'playwright-core'
import t, { type Test } from 'tap'
import { launchChromium } from '../support/chromium.js'
import { build, confirmAddress, uniqueEmail } from '../support/helper.js'
import { codeAt } from '../support/totp.js'
import { freePort } from './process.js'

/**
 * The web client's script: each ceremony as a page function the test calls, answering the
 * API's status and body. `window.passkeyClient` is what a web client would write with the
 * browser's own JSON helpers (parseCreationOptionsFromJSON, toJSON); `change` lets a test play
 * a client that asks for less (no user verification) or a tampering proxy.
 */
function webClientPage (api: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Web client</title></head>
<body><p>Passkeys</p>
<script type="module">
const api = ${JSON.stringify(api)}
async function call (path, body, method) {
  const res = await fetch(api + path, {
    method: method ?? (body ? 'POST' : 'GET'), credentials: 'include',
    headers: body ? { 'content-type': 'application/json' } : {}, body: body ? JSON.stringify(body) : undefined
  })
  return { status: res.status, body: await res.json() }
}
async function assertion (options, change = {}) {
  const publicKey = PublicKeyCredential.parseRequestOptionsFromJSON({ ...options, ...(change.userVerification && { userVerification: change.userVerification }) })
  const json = (await navigator.credentials.get({ publicKey })).toJSON()
  if (change.tamper) {
    const bytes = Uint8Array.from(atob(json.response.signature.replace(/-/g, '+').replace(/_/g, '/')), (c) => c.charCodeAt(0))
    bytes[bytes.length - 1] ^= 1
    json.response.signature = btoa(String.fromCharCode(...bytes)).replace(/\\+/g, '-').replace(/\\//g, '_').replace(/=+$/, '')
  }
  return json
}
window.passkeyClient = {
  call,
  assertion,
  async login (email, password) { return call('/auth/login', { email, password }) },
  async register (name) {
    const options = await call('/account/passkeys/options', {})
    if (options.status !== 200) return options
    const credential = await navigator.credentials.create({ publicKey: PublicKeyCredential.parseCreationOptionsFromJSON(options.body.data) })
    return call('/account/passkeys', { name, response: credential.toJSON() })
  },
  async signIn (change = {}) {
    const options = await call('/auth/passkey/options', change.email ? { email: change.email } : {})
    const response = await assertion(options.body.data, change)
    const first = await call('/auth/passkey', { response })
    if (!change.twice) return first
    return { first, second: await call('/auth/passkey', { response }) }
  },
  async secondFactor (mfaToken, change = {}) {
    const options = await call('/auth/passkey/options', { mfaToken })
    return call('/auth/mfa', { mfaToken, passkey: await assertion(options.body.data, change) })
  },
  async me () { return call('/auth/me') },
  async remove (id) { return call('/account/passkeys/' + id, undefined, 'DELETE') },
  async list () { return call('/account/passkeys') }
}
document.body.dataset.ready = 'yes'
</script>
</body></html>`
}

/** A page that answers every GET, on a port of its own: APP_URL's, or another origin's. */
async function serve (t: Test, html: () => string): Promise<string> {
  const server = createServer((req, res) => {
    if (req.method !== 'GET' || req.url === '/favicon.ico') return res.writeHead(req.method === 'GET' ? 204 : 405).end()
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' }).end(html())
  })
  server.listen(0, 'localhost')
  await once(server, 'listening')
  t.teardown(() => new Promise<void>((resolve) => {
    server.close(() => resolve())
    server.closeAllConnections()
  }))
  return `http://localhost:${(server.address() as AddressInfo).port}`
}

type Answer = { status: number, body: Record<string, any> }
type Client = Record<string, (...args: any[]) => Promise<any>>

/** Calls window.passkeyClient[name](...args) in the page. */
const inPage = <T = Answer>(page: Page, name: string, ...args: unknown[]): Promise<T> =>
  page.evaluate(([name, args]) => (globalThis as unknown as { passkeyClient: Client }).passkeyClient[name as string]!(...(args as unknown[])), [name, args] as const) as Promise<T>

async function virtualAuthenticator (cdp: CDPSession): Promise<string> {
  await cdp.send('WebAuthn.enable', { enableUI: false })
  const { authenticatorId } = await cdp.send('WebAuthn.addVirtualAuthenticator', {
    options: { protocol: 'ctap2', transport: 'internal', hasResidentKey: true, hasUserVerification: true, isUserVerified: true, automaticPresenceSimulation: true }
  })
  return authenticatorId
}

t.test('passkeys in Chromium: register, sign in past TOTP, presence only as a second factor, attacks refused, removal', async (t) => {
  // The pages listen first and read the API's address when served: a port chosen before them
  // could be handed to one of them (EADDRINUSE at the API's listen, seen once in a full run).
  let api = ''
  const appOrigin = await serve(t, () => webClientPage(api))
  const otherOrigin = await serve(t, () => webClientPage(api))
  const apiPort = await freePort()
  api = `http://localhost:${apiPort}`
  const server = await build(t, { API_URL: api, APP_URL: appOrigin })
  await server.listen({ port: apiPort, host: 'localhost' })

  // The account, with two-step sign-in on, set up through the API.
  const email = uniqueEmail('passkey-browser')
  const password = 'correct horse battery'
  const post = async (path: string, body: unknown, token?: string) => (await fetch(api + path, {
    method: 'POST', headers: { 'content-type': 'application/json', ...(token && { authorization: `Bearer ${token}` }) }, body: JSON.stringify(body)
  })).json() as Promise<Record<string, any>>
  const { token, user } = await post('/auth/register', { email, password })
  await confirmAddress(server, user.id)
  const { data: { secret } } = await post('/account/mfa/totp', { currentPassword: password }, token)
  const code = codeAt(secret)
  t.equal((await post('/account/mfa/totp/confirm', { code }, token)).success, true, 'two-step sign-in on')

  const { context, page } = await launchChromium(t, (url) => url.hostname === 'localhost')
  const problems: string[] = []
  page.on('pageerror', (err) => { problems.push(`page error: ${err.message}`) })
  const cdp = await context.newCDPSession(page)
  const authenticatorId = await virtualAuthenticator(cdp)
  await page.goto(appOrigin)
  await page.locator('body[data-ready="yes"]').waitFor()

  // Register: a fresh sign-in (password, then the code) and the browser's create().
  const login = await inPage(page, 'login', email, password)
  t.equal(login.body.mfaRequired, true)
  const stepTwo = await inPage(page, 'call', '/auth/mfa', { mfaToken: login.body.mfaToken, code: codeAt(secret, Date.now() + 30_000) })
  t.equal(stepTwo.status, 200, 'signed in with the password and a code')
  const registered = await inPage(page, 'register', 'Chromium')
  t.equal(registered.status, 201, 'registered')
  t.match(registered.body.data, { name: 'Chromium', synced: false, deviceBound: true })
  const { credentials } = await cdp.send('WebAuthn.getCredentials', { authenticatorId })
  t.equal(credentials.length, 1, 'the authenticator holds it')
  t.equal(credentials[0]!.rpId, 'localhost', 'for APP_URL\'s host')
  t.ok(credentials[0]!.isResidentCredential, 'discoverable')

  // Passwordless: no email, no password, no TOTP code.
  await context.clearCookies()
  const signedIn = await inPage(page, 'signIn')
  t.equal(signedIn.status, 200, 'signed in with the passkey alone')
  t.notOk(signedIn.body.mfaRequired, 'TOTP skipped: a passkey with user verification is both factors')
  t.equal((await inPage(page, 'me')).body.data.email, email, 'the cookie works')
  t.equal((await inPage(page, 'signIn', { email })).status, 200, 'by email too')

  // Presence only: refused alone, accepted as the second factor.
  await cdp.send('WebAuthn.setUserVerified', { authenticatorId, isUserVerified: false })
  await context.clearCookies()
  const alone = await inPage(page, 'signIn', { userVerification: 'discouraged' })
  t.same([alone.status, alone.body.code], [401, 'PASSKEY_USER_VERIFICATION_REQUIRED'], 'presence only cannot sign in alone')
  const challenged = await inPage(page, 'login', email, password)
  t.same(challenged.body.methods, ['totp', 'recovery', 'passkey'])
  const second = await inPage(page, 'secondFactor', challenged.body.mfaToken, { userVerification: 'discouraged' })
  t.equal(second.status, 200, 'presence only, as the second factor after the password')
  await cdp.send('WebAuthn.setUserVerified', { authenticatorId, isUserVerified: true })

  // Attacks, from the same browser.
  // The virtual authenticator belongs to this tab: it goes to the other origin and back.
  await page.goto(otherOrigin)
  await page.locator('body[data-ready="yes"]').waitFor()
  const foreignOptions = await post('/auth/passkey/options', {})
  const foreign = await inPage<Record<string, any>>(page, 'assertion', foreignOptions.data)
  t.match(JSON.parse(Buffer.from(foreign.response.clientDataJSON, 'base64url').toString()), { origin: otherOrigin }, 'the browser signed for the other origin')
  const fromElsewhere = await post('/auth/passkey', { response: foreign })
  t.equal(fromElsewhere.code, 'PASSKEY_INVALID', 'an assertion made on another origin')
  await page.goto(appOrigin)
  await page.locator('body[data-ready="yes"]').waitFor()

  const tampered = await inPage(page, 'signIn', { tamper: true })
  t.same([tampered.status, tampered.body.code], [401, 'PASSKEY_INVALID'], 'a signature altered on its way')

  const twice = await inPage<{ first: Answer, second: Answer }>(page, 'signIn', { twice: true })
  t.equal(twice.first.status, 200)
  t.same([twice.second.status, twice.second.body.code], [401, 'PASSKEY_INVALID'], 'the same answer again: its challenge is used')

  // A clone: the credential as it was, put back with its older counter.
  const [saved] = (await cdp.send('WebAuthn.getCredentials', { authenticatorId })).credentials
  t.equal((await inPage(page, 'signIn')).status, 200, 'one more sign-in moves the counter on')
  await cdp.send('WebAuthn.removeCredential', { authenticatorId, credentialId: saved!.credentialId })
  await cdp.send('WebAuthn.addCredential', { authenticatorId, credential: saved! })
  const cloned = await inPage(page, 'signIn')
  t.same([cloned.status, cloned.body.code], [401, 'PASSKEY_INVALID'], 'a device-bound counter that went back')
  const events = await server.db.selectFrom('security_events').select('type').where('user_id', '=', user.id).execute()
  t.ok(events.some((e) => e.type === 'passkey-counter-rejected'), 'recorded for the owner')

  // Removal: the account keeps its password, so the passkey can go; then it is unknown.
  await cdp.send('WebAuthn.removeCredential', { authenticatorId, credentialId: saved!.credentialId })
  await cdp.send('WebAuthn.addCredential', { authenticatorId, credential: { ...saved!, signCount: saved!.signCount + 100 } })
  t.equal((await inPage(page, 'signIn')).status, 200, 'the genuine authenticator (its counter ahead) signs in')
  const removed = await inPage(page, 'remove', registered.body.data.id)
  t.equal(removed.status, 200, 'removed')
  t.same((await inPage(page, 'list')).body.data, [])
  await context.clearCookies()
  const unknown = await inPage(page, 'signIn')
  t.same([unknown.status, unknown.body.code], [401, 'PASSKEY_UNKNOWN'], 'a removed passkey is unknown: the page can tell the browser')
  // What docs/passkeys.md tells a page to do with PASSKEY_UNKNOWN: the browser forgets it.
  const signalled = await page.evaluate(async (credentialId) => {
    const api = (globalThis as unknown as { PublicKeyCredential: unknown }).PublicKeyCredential as { signalUnknownCredential?: (o: { rpId: string, credentialId: string }) => Promise<void> }
    if (api.signalUnknownCredential === undefined) return 'unsupported'
    await api.signalUnknownCredential({ rpId: 'localhost', credentialId })
    return 'signalled'
  }, registered.body.data.credentialId as string)
  t.equal(signalled, 'signalled', 'the Signal API is there')
  t.same((await cdp.send('WebAuthn.getCredentials', { authenticatorId })).credentials, [], 'and the authenticator forgot the passkey')
  t.same(problems, [], 'no script error, nothing refused by CORS')
})
