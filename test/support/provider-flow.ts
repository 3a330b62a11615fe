// The browser's part of a provider sign-in, played over app.inject: a cookie jar kept from every
// answer and sent with every request, and the dance start → the provider → callback → exchange
// (or link) against a real OpenID Connect provider (test/support/oidc-provider.ts).
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import type { TestOidcProvider } from './oidc-provider.js'

/** A browser as far as the API sees it: its cookie jar, kept from every answer, sent with every request. */
export class Browser {
  readonly jar = new Map<string, string>()
  constructor (readonly app: FastifyInstance, readonly agent = 'Test Browser/1.0') {}

  async request (method: 'GET' | 'POST' | 'DELETE', url: string, options: { payload?: Record<string, unknown>, headers?: Record<string, string> } = {}): Promise<LightMyRequestResponse> {
    const res = await this.app.inject({
      method, url, headers: { 'user-agent': this.agent, ...options.headers }, cookies: Object.fromEntries(this.jar), ...(options.payload && { payload: options.payload })
    })
    for (const cookie of res.cookies) {
      if (cookie.maxAge === 0 || cookie.value === '' || (cookie.expires !== undefined && cookie.expires.getTime() <= Date.now())) this.jar.delete(cookie.name)
      else this.jar.set(cookie.name, cookie.value)
    }
    return res
  }
}

export const locationOf = (res: LightMyRequestResponse): URL => new URL(String(res.headers.location))

/** Provider sign-in and linking through `providerId` of `app`, at `idp`. */
export function providerFlow (app: FastifyInstance, idp: TestOidcProvider, providerId: string) {
  /** Start → the provider as `subject` → callback: where the browser lands. */
  async function landAt (subject: string, browser = new Browser(app)): Promise<URL> {
    const started = await browser.request('GET', `/auth/providers/${providerId}/start`)
    if (started.statusCode !== 302) throw new Error(`start: ${started.statusCode} ${started.body}`)
    const back = await idp.signInAt(String(started.headers.location), subject)
    return locationOf(await browser.request('GET', `${back.pathname}${back.search}`))
  }

  return {
    landAt,
    /** A sign-in as `subject` through to the exchange: its answer, or the callback's `error=` when it never got a code. */
    async signIn (subject: string): Promise<{ token: string, user: { id: string, email: string } } | { error: string | null }> {
      const browser = new Browser(app)
      const landed = await landAt(subject, browser)
      const code = landed.searchParams.get('signin')
      if (code === null) return { error: landed.searchParams.get('error') }
      const res = await browser.request('POST', '/auth/providers/exchange', { payload: { code } })
      if (res.statusCode !== 200) throw new Error(`exchange: ${res.statusCode} ${res.body}`)
      const body = res.json() as { token: string, user: { id: string, email: string } }
      return { token: body.token, user: body.user }
    },
    /** The signed-in caller (`auth`) links the identity of `subject`: where the browser lands. */
    async link (auth: Record<string, string>, subject: string): Promise<URL> {
      const browser = new Browser(app)
      const res = await browser.request('POST', `/account/identities/${providerId}`, { headers: auth })
      if (res.statusCode !== 200) throw new Error(`link: ${res.statusCode} ${res.body}`)
      const back = await idp.signInAt((res.json() as { data: { url: string } }).data.url, subject)
      return locationOf(await browser.request('GET', `${back.pathname}${back.search}`))
    }
  }
}
