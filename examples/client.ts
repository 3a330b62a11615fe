// An example client generated from openapi.json: openapi-typescript's types
// (examples/api-types.ts, `npm run openapi`) with openapi-fetch. Paths, bodies and
// responses are all type-checked; a renamed field in the API breaks this file's build.
import createClient from 'openapi-fetch'
import type { paths } from './api-types.js'

export function apiClient (baseUrl: string, token?: string) {
  return createClient<paths>({ baseUrl, headers: token ? { authorization: `Bearer ${token}` } : {} })
}

/** Register, sign in, create and list tasks, start a checkout. */
export async function walkthrough (baseUrl: string, account: { email: string, password: string, priceId: string }) {
  const anonymous = apiClient(baseUrl)
  const registered = await anonymous.POST('/auth/register', { body: { name: 'Example', email: account.email, password: account.password } })
  // Programs branch on the stable `code`; `error` is the text for people.
  if (registered.error && registered.error.code !== 'EMAIL_TAKEN') throw new Error(`register: ${registered.error.error}`)

  const signedIn = await anonymous.POST('/auth/login', { body: { email: account.email, password: account.password } })
  if (signedIn.error) throw new Error(`login: ${signedIn.error.error}`)
  const api = apiClient(baseUrl, signedIn.data.token)

  const created = await api.POST('/tasks', { body: { title: 'Try the typed client', status: 'in-progress' } })
  if (created.error) throw new Error(`create task: ${created.error.error}`)

  const listed = await api.GET('/tasks', { params: { query: { status: 'in-progress', limit: 10 } } })
  if (listed.error) throw new Error(`list tasks: ${listed.error.error}`)

  const checkout = await api.POST('/checkout', { body: { priceId: account.priceId } })
  if (checkout.error) throw new Error(`checkout: ${checkout.error.error}`)

  const { data: tasks, total, todo, inProgress, completed } = listed.data
  return {
    user: signedIn.data.user,
    task: created.data.data,
    tasks,
    counts: { total, todo, inProgress, completed },
    totalHeader: Number(listed.response.headers.get('x-total-count')),
    checkoutUrl: checkout.data.data.url,
    checkoutSessionId: checkout.data.data.sessionId
  }
}

/** "Forgot password": the service emails a reset link if the address has an account (same answer either way). */
export async function forgotPassword (baseUrl: string, email: string): Promise<void> {
  const { error, response } = await apiClient(baseUrl).POST('/auth/password/forgot', { body: { email } })
  if (error) throw new Error(`forgot password: ${error.error}`)
  if (response.status !== 202) throw new Error(`forgot password: unexpected status ${response.status}`)
}

/** Sets the new password with the token from the emailed link; signed in with the new token. */
export async function resetPassword (baseUrl: string, token: string, password: string) {
  const { data, error } = await apiClient(baseUrl).POST('/auth/password/reset', { body: { token, password } })
  if (error) throw new Error(`reset password: ${error.code}`)
  return { token: data.token, user: data.user }
}

/** After a provider sign-in the web client lands on `returnTo?signin=<code>`: the code, exchanged within 60 s, signs in. */
export async function exchangeSignInCode (baseUrl: string, code: string) {
  const { data, error } = await apiClient(baseUrl).POST('/auth/providers/exchange', { body: { code } })
  if (error) throw new Error(`sign-in code: ${error.code}`)
  return { token: data.token, user: data.user }
}

/** Where the account is signed in, sign out everywhere else, and what happened to it lately. */
export async function securityCheckup (baseUrl: string, token: string) {
  const api = apiClient(baseUrl, token)
  const sessions = await api.GET('/account/sessions')
  if (sessions.error) throw new Error(`sessions: ${sessions.error.code}`)
  const others = sessions.data.data.filter((session) => !session.current)
  const ended = await api.POST('/auth/logout-others')
  if (ended.error) throw new Error(`sign out others: ${ended.error.code}`)
  const events = await api.GET('/account/security-events', { params: { query: { limit: 20 } } })
  if (events.error) throw new Error(`security events: ${events.error.code}`)
  const providers = await api.GET('/auth/providers')
  if (providers.error) throw new Error(`providers: ${providers.error.code}`)
  return {
    current: sessions.data.data.find((session) => session.current),
    others,
    ended: ended.data.data.ended,
    events: events.data.data,
    providers: providers.data.data
  }
}

// `npx tsx examples/client.ts http://127.0.0.1:3002 price_…` against a running server.
if (import.meta.url === `file://${process.argv[1]}`) {
  const [baseUrl = 'http://127.0.0.1:3002', priceId = 'price_pro_monthly'] = process.argv.slice(2)
  console.log(await walkthrough(baseUrl, { email: `example-${Date.now()}@example.com`, password: 'correct horse battery', priceId }))
}
