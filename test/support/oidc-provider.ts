// A real OpenID Connect provider for the tests (panva's oidc-provider) on 127.0.0.1: discovery,
// JWKS, authorization, token and userinfo endpoints as an identity provider serves them, its
// login and consent answered over plain HTTP by signInAt or through a sign-in form in a browser,
// and its ID tokens re-shapeable to play a provider that lies or a forger that signs with a key
// of its own.
import { createPrivateKey, generateKeyPairSync, randomBytes, sign, type KeyObject } from 'node:crypto'
import { once } from 'node:events'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Adapter, AdapterPayload, Configuration, KoaContextWithOIDC } from 'oidc-provider'
import type ProviderClass from 'oidc-provider'

export interface TestAccount { subject: string, email?: string, emailVerified?: boolean, name?: string }

export interface TestClient { clientId: string, clientSecret: string, redirectUris: string[] }

export type IdTokenClaims = Record<string, unknown>

export interface TestOidcProvider {
  /** The issuer identifier, `http://127.0.0.1:<port>`. */
  issuer: string
  /**
   * Follows the authorization URL through the provider's login and consent over HTTP (fetch
   * with a cookie jar, no browser) as `subject`, and returns the URL the provider redirects back
   * to (the client's redirect URI with code and state), without following it.
   */
  signInAt: (authorizationUrl: string, subject: string) => Promise<URL>
  /**
   * Re-shapes the ID tokens the token endpoint returns from now on (until called with null):
   * `fn` changes their claims; `signWithForeignKey` signs them with a key the provider's JWKS
   * does not hold (same `kid`), otherwise they are re-signed with the provider's own key.
   */
  tamperIdTokens: (fn: ((claims: IdTokenClaims) => IdTokenClaims) | null, options?: { signWithForeignKey?: boolean }) => void
  /** The provider goes down: the server closes with its connections. Idempotent. */
  stop: () => Promise<void>
  /** Back up on the same port, with the same keys, clients and state. */
  restart: () => Promise<void>
}

interface Teardown { teardown: (fn: () => unknown) => void }

// oidc-provider says at import that it supports Node 22 LTS and later (it runs on 20 here, where
// the tests run today): that one notice is dropped, any other warning is shown.
const { default: Provider } = await withoutWarning(/^oidc-provider WARNING: Unsupported runtime/, () => import('oidc-provider'))

async function withoutWarning<T> (pattern: RegExp, load: () => Promise<T>): Promise<T> {
  const warn = console.warn
  console.warn = (...args: unknown[]) => {
    if (typeof args[0] === 'string' && pattern.test(args[0])) return
    warn(...args)
  }
  try {
    return await load()
  } finally {
    console.warn = warn
  }
}

export async function startOidcProvider (t: Teardown, opts: { clients: TestClient[], accounts: TestAccount[] }): Promise<TestOidcProvider> {
  const server = createServer()
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as AddressInfo
  const issuer = `http://127.0.0.1:${port}`

  const signing = signingKey('test-key-1')
  // A key of the same shape and `kid` that the provider's JWKS does not publish: a forger's.
  const foreign = signingKey('test-key-1')
  const accounts = new Map(opts.accounts.map((account) => [account.subject, account]))
  const provider = new Provider(issuer, configuration(opts.clients, accounts, signing.jwk))

  let tamper: { fn: ((claims: IdTokenClaims) => IdTokenClaims) | null, key: KeyObject } | undefined
  provider.use(async (ctx: KoaContextWithOIDC, next: () => Promise<unknown>) => {
    await next()
    if (tamper === undefined || ctx.oidc?.route !== 'token' || ctx.status !== 200) return
    const body = ctx.body as { id_token?: unknown } | undefined
    if (typeof body?.id_token !== 'string') return
    body.id_token = reshape(body.id_token, tamper.fn, tamper.key)
  })
  // What went wrong inside the provider, for signInAt's failure message (and no console noise).
  let lastServerError: Error | undefined
  provider.on('server_error', (_ctx: unknown, error: Error) => { lastServerError = error })

  const providerCallback = provider.callback()
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    if (req.url?.startsWith('/interaction/')) {
      answerInteraction(provider, accounts, req, res).catch((error: unknown) => {
        lastServerError = error as Error
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' })
        res.end(String(error))
      })
      return
    }
    providerCallback(req, res).catch((error: unknown) => { lastServerError = error as Error })
  })

  let listening = true
  const stop = async (): Promise<void> => {
    if (!listening) return
    listening = false
    const closed = new Promise<void>((resolve) => server.close(() => resolve()))
    server.closeAllConnections()
    await closed
  }
  t.teardown(stop)

  return {
    issuer,
    async signInAt (authorizationUrl, subject) {
      const jar = new CookieJar()
      let url = new URL(authorizationUrl)
      for (let hop = 0; hop < 10; hop++) {
        if (url.origin !== issuer) return url
        if (url.pathname.startsWith('/interaction/')) url.searchParams.set('subject', subject)
        const res = await fetch(url, { redirect: 'manual', headers: { cookie: jar.header() } })
        jar.keep(res.headers.getSetCookie())
        const body = await res.text()
        const location = res.headers.get('location')
        if (res.status < 300 || res.status >= 400 || location === null) {
          throw new Error(`sign-in stopped at ${url.pathname}: ${res.status} ${body.slice(0, 300)}${lastServerError ? ` (${lastServerError.message})` : ''}`)
        }
        url = new URL(location, url)
      }
      throw new Error('sign-in: too many redirects')
    },
    tamperIdTokens (fn, options = {}) {
      tamper = fn === null && options.signWithForeignKey !== true ? undefined : { fn, key: options.signWithForeignKey === true ? foreign.privateKey : signing.privateKey }
    },
    stop,
    async restart () {
      if (listening) return
      server.listen(port, '127.0.0.1')
      await once(server, 'listening')
      listening = true
    }
  }
}

function configuration (clients: TestClient[], accounts: Map<string, TestAccount>, jwk: Record<string, unknown>): Configuration {
  const store = new Map<string, { payload: AdapterPayload, expiresAt: number | undefined }>()
  return {
    adapter: (name: string) => new MemoryAdapter(name, store),
    clients: clients.map((client) => ({
      client_id: client.clientId,
      client_secret: client.clientSecret,
      redirect_uris: client.redirectUris,
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic'
    })),
    jwks: { keys: [jwk] },
    cookies: { keys: [randomBytes(32).toString('base64url')] },
    // The scopes a sign-in asks for and the claims they stand for.
    claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'] },
    // As Google does: the scope's claims in the ID token too, not only from userinfo.
    conformIdTokenClaims: false,
    features: { devInteractions: { enabled: false } },
    interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
    pkce: { required: () => true },
    findAccount: (_ctx, id) => {
      const account = accounts.get(id)
      if (account === undefined) return undefined
      return {
        accountId: id,
        claims: () => ({
          sub: account.subject,
          ...(account.email !== undefined && { email: account.email }),
          ...(account.emailVerified !== undefined && { email_verified: account.emailVerified }),
          ...(account.name !== undefined && { name: account.name })
        })
      }
    },
    // Set, so that the provider's defaults do not print that they should be.
    ttl: { AccessToken: 600, AuthorizationCode: 60, IdToken: 600, Interaction: 600, Session: 600, Grant: 600 },
    renderError: (ctx, out) => {
      ctx.type = 'json'
      ctx.body = out
    }
  }
}

/**
 * The provider's login and consent. Login as the `subject` the query names (signInAt), or, for a
 * browser, a form asking for it that posts back here; consent at once to whatever the client
 * asked for.
 */
async function answerInteraction (provider: ProviderClass, accounts: Map<string, TestAccount>, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const details = await provider.interactionDetails(req, res)
  if (details.prompt.name === 'login') {
    let subject = new URL(req.url ?? '/', 'http://x').searchParams.get('subject')
    if (req.method === 'POST') subject = new URLSearchParams(await formBody(req)).get('subject') ?? ''
    if (subject === null) {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(signInForm(details.uid))
      return
    }
    if (!accounts.has(subject)) {
      if (req.method === 'POST') res.writeHead(400, { 'content-type': 'text/html; charset=utf-8' }).end(signInForm(details.uid, `No test account ${subject}.`))
      else res.writeHead(400, { 'content-type': 'text/plain' }).end(`no test account ${subject}`)
      return
    }
    await provider.interactionFinished(req, res, { login: { accountId: subject } }, { mergeWithLastSubmission: false })
    return
  }
  const { session, params, prompt } = details
  const grant = details.grantId !== undefined
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId: session?.accountId ?? '', clientId: String(params.client_id) })
  if (grant === undefined) throw new Error(`grant ${details.grantId} not found`)
  const missing = prompt.details as { missingOIDCScope?: string[], missingOIDCClaims?: string[], missingResourceScopes?: Record<string, string[]> }
  if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '))
  if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims)
  for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes ?? {})) grant.addResourceScope(indicator, scopes.join(' '))
  const grantId = await grant.save()
  await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true })
}

/** The login page a browser gets: one field, the test account's subject, posted back to the interaction. */
function signInForm (uid: string, problem?: string): string {
  const alert = problem === undefined ? '' : `<p role="alert">${escapeHtml(problem)}</p>`
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Test provider: sign in</title></head>
<body><h1>Test provider</h1>${alert}
<form method="post" action="/interaction/${encodeURIComponent(uid)}">
<label>Subject <input name="subject" required autofocus></label>
<button type="submit">Sign in</button>
</form></body></html>`
}

const escapeHtml = (text: string) => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)

/** A posted form's body as text; a test page's form is a few bytes, so more than 4 KiB is refused. */
async function formBody (req: IncomingMessage): Promise<string> {
  let body = ''
  for await (const chunk of req) {
    body += String(chunk)
    if (body.length > 4096) throw new Error('sign-in form body over 4 KiB')
  }
  return body
}

/** The provider's state (sessions, interactions, codes, grants, tokens) in memory, per provider. */
class MemoryAdapter implements Adapter {
  constructor (private readonly model: string, private readonly store: Map<string, { payload: AdapterPayload, expiresAt: number | undefined }>) {}

  private key (id: string): string { return `${this.model}:${id}` }

  private live (key: string): AdapterPayload | undefined {
    const entry = this.store.get(key)
    if (entry === undefined) return undefined
    if (entry.expiresAt !== undefined && entry.expiresAt <= Date.now()) {
      this.store.delete(key)
      return undefined
    }
    return structuredClone(entry.payload)
  }

  async upsert (id: string, payload: AdapterPayload, expiresIn?: number): Promise<void> {
    const expiresAt = expiresIn === undefined ? undefined : Date.now() + expiresIn * 1000
    this.store.set(this.key(id), { payload: structuredClone(payload), expiresAt })
    if (payload.uid !== undefined) this.store.set(`${this.model}:uid:${payload.uid}`, { payload: { id } as AdapterPayload, expiresAt })
    if (payload.grantId !== undefined) this.store.set(`grant:${payload.grantId}:${this.key(id)}`, { payload: {}, expiresAt })
  }

  async find (id: string): Promise<AdapterPayload | undefined> { return this.live(this.key(id)) }

  async findByUid (uid: string): Promise<AdapterPayload | undefined> {
    const pointer = this.live(`${this.model}:uid:${uid}`) as { id?: string } | undefined
    return pointer?.id === undefined ? undefined : this.find(pointer.id)
  }

  async findByUserCode (): Promise<undefined> { return undefined }

  async consume (id: string): Promise<void> {
    const entry = this.store.get(this.key(id))
    if (entry !== undefined) entry.payload.consumed = Math.floor(Date.now() / 1000)
  }

  async destroy (id: string): Promise<void> { this.store.delete(this.key(id)) }

  async revokeByGrantId (grantId: string): Promise<void> {
    const prefix = `grant:${grantId}:`
    for (const key of [...this.store.keys()]) {
      if (!key.startsWith(prefix)) continue
      this.store.delete(key)
      this.store.delete(key.slice(prefix.length))
    }
  }
}

/** An RS256 key pair; the private half as the JWK the provider's `jwks` takes. */
function signingKey (kid: string): { privateKey: KeyObject, jwk: Record<string, unknown> } {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 })
  const jwk = { ...privateKey.export({ format: 'jwk' }), kid, alg: 'RS256', use: 'sig' }
  return { privateKey: createPrivateKey({ key: jwk, format: 'jwk' }), jwk }
}

/** The same compact JWS with its claims changed by `fn`, signed RS256 by `key`. */
function reshape (idToken: string, fn: ((claims: IdTokenClaims) => IdTokenClaims) | null, key: KeyObject): string {
  const [header = '', payload = ''] = idToken.split('.')
  const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as IdTokenClaims
  const reshaped = fn === null ? claims : fn(claims)
  const signingInput = `${header}.${Buffer.from(JSON.stringify(reshaped)).toString('base64url')}`
  return `${signingInput}.${sign('sha256', Buffer.from(signingInput), key).toString('base64url')}`
}

/** Enough of a cookie jar for one provider origin: names and values, dropped when expired. */
class CookieJar {
  private readonly cookies = new Map<string, string>()

  keep (setCookies: string[]): void {
    for (const line of setCookies) {
      const [pair = '', ...attributes] = line.split(';')
      const eq = pair.indexOf('=')
      const name = pair.slice(0, eq).trim()
      const value = pair.slice(eq + 1).trim()
      const expires = attributes.map((a) => a.trim()).find((a) => /^expires=/i.test(a))
      const expired = expires !== undefined && Date.parse(expires.slice('expires='.length)) <= Date.now()
      if (value === '' || expired) this.cookies.delete(name)
      else this.cookies.set(name, value)
    }
  }

  header (): string {
    return [...this.cookies].map(([name, value]) => `${name}=${value}`).join('; ')
  }
}
