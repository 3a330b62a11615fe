// The OpenID Connect adapter against a real provider (oidc-provider, test/support/oidc-provider.ts):
// the whole redirect dance over HTTP, then every way a callback, a token or the provider fails.
import { createHash } from 'node:crypto'
import { once } from 'node:events'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { IdentityProviderError, openIdProvider, randomFlowSecrets, type FlowSecrets, type IdentityProvider, type VerifiedIdentity } from '../../accounts/identity-provider.js'
import { startOidcProvider, type IdTokenClaims } from '../support/oidc-provider.js'

const REDIRECT_URI = 'http://127.0.0.1:3000/auth/providers/test/callback'
const client = { clientId: 'task-app', clientSecret: 'a-client-secret-for-the-tests', redirectUris: [REDIRECT_URI] }
const idp = await startOidcProvider(t, {
  clients: [client],
  accounts: [
    { subject: 'alice-1', email: 'alice@example.com', emailVerified: true, name: 'Alice Example' },
    { subject: 'bob-2', email: 'bob@example.com', emailVerified: false },
    { subject: 'carol-3' }
  ]
})
const settings = { id: 'test', name: 'Test IdP', issuer: idp.issuer, clientId: client.clientId, clientSecret: client.clientSecret }
const provider = openIdProvider(settings)

interface SignedIn { callbackUrl: URL, secrets: FlowSecrets, verify: (changes?: Partial<FlowSecrets> & { callbackUrl?: URL }) => Promise<VerifiedIdentity> }

/** Starts a sign-in, signs in at the provider as `subject`, and hands back the callback. */
async function signIn (subject: string, through: IdentityProvider = provider): Promise<SignedIn> {
  const secrets = randomFlowSecrets()
  const callbackUrl = await idp.signInAt(await through.authorizationUrl({ redirectUri: REDIRECT_URI, ...secrets }), subject)
  return {
    callbackUrl,
    secrets,
    verify: (changes = {}) => through.verifyCallback({ callbackUrl, redirectUri: REDIRECT_URI, ...secrets, ...changes })
  }
}

/** Fails unless `promise` rejects with our error for `reason`; returns the error. */
async function failure (promise: Promise<unknown>, reason: IdentityProviderError['reason']): Promise<IdentityProviderError> {
  const error = await promise.then(() => undefined, (e: unknown) => e)
  if (!(error instanceof IdentityProviderError)) throw new Error(`expected an IdentityProviderError, got ${String(error)}`)
  if (error.reason !== reason) throw new Error(`expected ${reason}, got ${error.reason}: ${error.message}`)
  return error
}

/** Runs `body` with the provider's ID tokens re-shaped, and stops after. */
async function withTamperedIdTokens (fn: ((claims: IdTokenClaims) => IdTokenClaims) | null, options: { signWithForeignKey?: boolean }, body: () => Promise<void>): Promise<void> {
  idp.tamperIdTokens(fn, options)
  try {
    await body()
  } finally {
    idp.tamperIdTokens(null)
  }
}

t.test('the authorization URL: code flow at the discovered endpoint, PKCE S256, state, nonce, our scopes', async (t) => {
  const secrets = randomFlowSecrets()
  t.match(secrets, { state: /^[\w-]{43,}$/, nonce: /^[\w-]{43,}$/, codeVerifier: /^[\w-]{43,128}$/ })
  t.not(randomFlowSecrets().state, secrets.state)
  const url = new URL(await provider.authorizationUrl({ redirectUri: REDIRECT_URI, ...secrets }))
  t.equal(`${url.origin}${url.pathname}`, `${idp.issuer}/auth`)
  t.same(Object.fromEntries(url.searchParams), {
    client_id: client.clientId,
    response_type: 'code',
    redirect_uri: REDIRECT_URI,
    scope: 'openid email profile',
    state: secrets.state,
    nonce: secrets.nonce,
    code_challenge: createHash('sha256').update(secrets.codeVerifier).digest('base64url'),
    code_challenge_method: 'S256'
  })
  t.equal(provider.id, 'test')
  t.equal(provider.name, 'Test IdP')
})

t.test('a sign-in: the verified identity from the ID token', async (t) => {
  const { callbackUrl, secrets, verify } = await signIn('alice-1')
  t.equal(`${callbackUrl.origin}${callbackUrl.pathname}`, REDIRECT_URI, 'the provider sent the browser back to us')
  t.equal(callbackUrl.searchParams.get('state'), secrets.state)
  t.ok(callbackUrl.searchParams.get('code'))
  t.same(await verify(), { issuer: idp.issuer, subject: 'alice-1', email: 'alice@example.com', emailVerified: true, name: 'Alice Example' })
})

t.test('email_verified false, or anything but true, is not verified', async (t) => {
  t.same(await (await signIn('bob-2')).verify(), { issuer: idp.issuer, subject: 'bob-2', email: 'bob@example.com', emailVerified: false, name: null })
  await withTamperedIdTokens((claims) => ({ ...claims, email_verified: 'true' }), {}, async () => {
    const identity = await (await signIn('alice-1')).verify()
    t.equal(identity.emailVerified, false, 'the string "true" is not true')
  })
})

t.test('no email in the ID token: userinfo is asked; none there either: null', async (t) => {
  await withTamperedIdTokens(({ email, email_verified: verified, name, ...claims }) => claims, {}, async () => {
    t.same(await (await signIn('alice-1')).verify(), { issuer: idp.issuer, subject: 'alice-1', email: 'alice@example.com', emailVerified: true, name: 'Alice Example' })
  })
  t.same(await (await signIn('carol-3')).verify(), { issuer: idp.issuer, subject: 'carol-3', email: null, emailVerified: false, name: null })
})

t.test('a callback that is not this flow\'s, or a refusal, is rejected before any exchange', async (t) => {
  const { callbackUrl, verify } = await signIn('alice-1')
  const code = callbackUrl.searchParams.get('code')!
  const other = randomFlowSecrets()
  const error = await failure(verify({ state: other.state }), 'rejected')
  t.match(error.message, /state/)
  t.notOk(error.message.includes(code), 'the code is not in the message')

  const noState = new URL(callbackUrl)
  noState.searchParams.delete('state')
  await failure(verify({ callbackUrl: noState }), 'rejected')
  const twice = new URL(callbackUrl)
  twice.searchParams.append('code', 'another')
  await failure(verify({ callbackUrl: twice }), 'rejected')

  const refused = new URL(REDIRECT_URI)
  refused.search = new URLSearchParams({ error: 'access_denied', state: other.state, iss: idp.issuer }).toString()
  t.match((await failure(provider.verifyCallback({ callbackUrl: refused, redirectUri: REDIRECT_URI, ...other }), 'rejected')).message, /access_denied/)

  const mixUp = new URL(callbackUrl)
  mixUp.searchParams.set('iss', 'https://idp.example.com')
  await failure(verify({ callbackUrl: mixUp }), 'rejected')

  t.same((await verify()).subject, 'alice-1', 'the genuine callback still works after all that')
})

t.test('a replayed code is rejected by the provider', async (t) => {
  const { callbackUrl, verify } = await signIn('alice-1')
  await verify()
  const error = await failure(verify(), 'rejected')
  t.match(error.message, /invalid_grant/)
  t.notOk(error.message.includes(callbackUrl.searchParams.get('code')!), 'the code is not in the message')
})

t.test('another flow\'s PKCE verifier is rejected by the provider', async (t) => {
  const { verify } = await signIn('alice-1')
  t.match((await failure(verify({ codeVerifier: randomFlowSecrets().codeVerifier }), 'rejected')).message, /invalid_grant/)
})

t.test('another flow\'s nonce: invalid-token', async (t) => {
  const { verify } = await signIn('alice-1')
  t.match((await failure(verify({ nonce: randomFlowSecrets().nonce }), 'invalid-token')).message, /nonce/)
})

t.test('an ID token re-signed with the provider\'s own key and unchanged claims passes (the control)', async (t) => {
  await withTamperedIdTokens((claims) => claims, {}, async () => {
    t.equal((await (await signIn('alice-1')).verify()).subject, 'alice-1')
  })
})

const now = () => Math.floor(Date.now() / 1000)
const forgeries: Array<[string, ((claims: IdTokenClaims) => IdTokenClaims) | null, { signWithForeignKey?: boolean }, RegExp]> = [
  ['for another audience', (claims) => ({ ...claims, aud: 'another-client' }), {}, /aud/],
  ['with another nonce', (claims) => ({ ...claims, nonce: 'not-the-flows-nonce' }), {}, /nonce/],
  ['from another issuer', (claims) => ({ ...claims, iss: 'https://idp.example.com' }), {}, /iss/],
  ['expired', (claims) => ({ ...claims, iat: now() - 600, exp: now() - 300 }), {}, /exp|timestamp/],
  ['signed by a key not in the provider\'s JWKS', null, { signWithForeignKey: true }, /signature/],
  ['with a changed subject and a foreign signature', (claims) => ({ ...claims, sub: 'bob-2' }), { signWithForeignKey: true }, /signature/]
]
for (const [what, fn, options, message] of forgeries) {
  t.test(`an ID token ${what}: invalid-token`, async (t) => {
    await withTamperedIdTokens(fn, options, async () => {
      const { callbackUrl, verify } = await signIn('alice-1')
      const error = await failure(verify(), 'invalid-token')
      t.match(error.message, message)
      t.notOk(error.message.includes(callbackUrl.searchParams.get('code')!), 'the code is not in the message')
    })
  })
}

t.test('provider down before discovery: unavailable, and discovery is tried again once it is back', async (t) => {
  const fresh = openIdProvider(settings)
  await idp.stop()
  try {
    t.match((await failure(fresh.authorizationUrl({ redirectUri: REDIRECT_URI, ...randomFlowSecrets() }), 'unavailable')).message, /discovery failed/)
  } finally {
    await idp.restart()
  }
  t.equal((await (await signIn('alice-1', fresh)).verify()).subject, 'alice-1', 'the failed discovery was not kept')
})

t.test('provider down after discovery, before the code exchange: unavailable', async (t) => {
  const { verify } = await signIn('alice-1')
  await idp.stop()
  try {
    t.match((await failure(verify(), 'unavailable')).message, /code exchange/)
  } finally {
    await idp.restart()
  }
})

t.test('nothing listening at the issuer: unavailable', async (t) => {
  const gone = createServer()
  gone.listen(0, '127.0.0.1')
  await once(gone, 'listening')
  const { port } = gone.address() as AddressInfo
  await new Promise((resolve) => gone.close(resolve))
  const nowhere = openIdProvider({ ...settings, issuer: `http://127.0.0.1:${port}` })
  t.match((await failure(nowhere.authorizationUrl({ redirectUri: REDIRECT_URI, ...randomFlowSecrets() }), 'unavailable')).message, /ECONNREFUSED/)
})

t.test('a provider that never answers: unavailable within the timeout', async (t) => {
  const silent = createServer(() => {})
  silent.listen(0, '127.0.0.1')
  await once(silent, 'listening')
  t.teardown(() => { silent.closeAllConnections(); silent.close() })
  const hanging = openIdProvider({ ...settings, issuer: `http://127.0.0.1:${(silent.address() as AddressInfo).port}` }, { timeoutMs: 300 })
  const started = Date.now()
  t.match((await failure(hanging.authorizationUrl({ redirectUri: REDIRECT_URI, ...randomFlowSecrets() }), 'unavailable')).message, /timed out/)
  t.ok(Date.now() - started < 3000, `gave up after ${Date.now() - started} ms`)
})

t.test('an issuer without https is refused unless it is on this machine', async (t) => {
  for (const issuer of ['http://idp.example.com', 'http://127.0.0.1.example.com', 'http://10.0.0.1', 'ftp://idp.example.com', 'not a url']) {
    t.throws(() => openIdProvider({ ...settings, issuer }), /issuer/, issuer)
  }
  for (const issuer of ['https://accounts.google.com', 'http://127.0.0.1:8080', 'http://localhost:8080', 'http://[::1]:8080']) {
    t.doesNotThrow(() => openIdProvider({ ...settings, issuer }), issuer)
  }
})

t.test('a flow without its secrets is the caller\'s bug: thrown as it is, before the code is spent', async (t) => {
  const { verify } = await signIn('alice-1')
  await t.rejects(verify({ nonce: '' }), { name: 'TypeError', message: /nonce/ })
  await t.rejects(provider.authorizationUrl({ redirectUri: REDIRECT_URI, ...randomFlowSecrets(), codeVerifier: '' }), { name: 'TypeError' })
  t.equal((await verify()).subject, 'alice-1', 'the code was still good')
})
