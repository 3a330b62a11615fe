// An example client generated from openapi.json: openapi-typescript's types
// (examples/api-types.ts, `npm run openapi`) with openapi-fetch. Paths, bodies and
// responses are all type-checked; a renamed field in the API breaks this file's build.
import createClient from 'openapi-fetch'
import type { components, paths } from './api-types.js'

/** A client that sends `credential` (a session token, or a personal API key: docs/api-keys.md) as the bearer. */
export function apiClient (baseUrl: string, credential?: string) {
  return createClient<paths>({ baseUrl, headers: credential ? { authorization: `Bearer ${credential}` } : {} })
}

/** What a sign-in (login, reset, provider exchange) answers: signed in, or, with two-step sign-in on, the challenge. */
type SignInResponse = components['schemas']['SignInResponse']
/** Asks the person for their authenticator app's code, or one of their recovery codes. */
export type AskForCode = (methods: Array<'totp' | 'recovery' | 'passkey'>) => Promise<{ code: string } | { recoveryCode: string }>

/** The token and user of a sign-in; for an account with two-step sign-in, after POST /auth/mfa with what `askForCode` gives. */
async function finishSignIn (baseUrl: string, answer: SignInResponse, askForCode?: AskForCode) {
  if (!('mfaRequired' in answer)) return { token: answer.token, user: answer.user }
  if (askForCode === undefined) throw new Error('two-step sign-in is on for this account: a code is needed')
  const { data, error } = await apiClient(baseUrl).POST('/auth/mfa', { body: { mfaToken: answer.mfaToken, ...await askForCode(answer.methods) } })
  // MFA_CODE_INVALID: ask again (five tries); MFA_TOKEN_INVALID: sign in again; RATE_LIMITED: wait Retry-After.
  if (error) throw new Error(`second factor: ${error.code}`)
  return { token: data.token, user: data.user, recoveryCodesLeft: data.recoveryCodesLeft }
}

/** Register, sign in, create and list tasks, start a checkout. */
export async function walkthrough (baseUrl: string, account: { email: string, password: string, priceId: string }, askForCode?: AskForCode) {
  const anonymous = apiClient(baseUrl)
  const registered = await anonymous.POST('/auth/register', { body: { name: 'Example', email: account.email, password: account.password } })
  // Programs branch on the stable `code`; `error` is the text for people.
  if (registered.error && registered.error.code !== 'EMAIL_TAKEN') throw new Error(`register: ${registered.error.error}`)

  const login = await anonymous.POST('/auth/login', { body: { email: account.email, password: account.password } })
  if (login.error) throw new Error(`login: ${login.error.error}`)
  const signedIn = await finishSignIn(baseUrl, login.data, askForCode)
  const api = apiClient(baseUrl, signedIn.token)

  const created = await api.POST('/tasks', { body: { title: 'Try the typed client', status: 'in-progress' } })
  if (created.error) throw new Error(`create task: ${created.error.error}`)

  const listed = await api.GET('/tasks', { params: { query: { status: 'in-progress', limit: 10 } } })
  if (listed.error) throw new Error(`list tasks: ${listed.error.error}`)

  const checkout = await api.POST('/checkout', { body: { priceId: account.priceId } })
  if (checkout.error) throw new Error(`checkout: ${checkout.error.error}`)

  const { data: tasks, total, todo, inProgress, completed } = listed.data
  return {
    user: signedIn.user,
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
export async function resetPassword (baseUrl: string, token: string, password: string, askForCode?: AskForCode) {
  const { data, error } = await apiClient(baseUrl).POST('/auth/password/reset', { body: { token, password } })
  if (error) throw new Error(`reset password: ${error.code}`)
  // A reset never turns two-step sign-in off: it asks for the code like a sign-in.
  return finishSignIn(baseUrl, data, askForCode)
}

/** After a provider sign-in the web client lands on `returnTo?signin=<code>`: the code, exchanged within 60 s, signs in. */
export async function exchangeSignInCode (baseUrl: string, code: string, askForCode?: AskForCode) {
  const { data, error } = await apiClient(baseUrl).POST('/auth/providers/exchange', { body: { code } })
  if (error) throw new Error(`sign-in code: ${error.code}`)
  return finishSignIn(baseUrl, data, askForCode)
}

/**
 * Turns two-step sign-in on: the seed for the authenticator app (`addToApp` shows the
 * otpauth:// URI as a QR code and returns the first code the app shows), then the ten recovery
 * codes to keep. Within STEP_UP_MAX_AGE_S of signing in, or after POST /auth/step-up.
 */
export async function turnOnTwoStep (baseUrl: string, token: string, password: string, addToApp: (otpauthUrl: string, secret: string) => Promise<string>) {
  const api = apiClient(baseUrl, token)
  const enrolled = await api.POST('/account/mfa/totp', { body: { currentPassword: password } })
  // STEP_UP_REQUIRED: POST /auth/step-up first (error.stepUp.methods says with what);
  // EMAIL_NOT_VERIFIED: the address must be confirmed first (POST /auth/email/verification).
  if (enrolled.error) throw new Error(`enrol: ${enrolled.error.code}`)
  const code = await addToApp(enrolled.data.data.otpauthUrl, enrolled.data.data.secret)
  const confirmed = await api.POST('/account/mfa/totp/confirm', { body: { code } })
  if (confirmed.error) throw new Error(`confirm: ${confirmed.error.code}`)
  return { recoveryCodes: confirmed.data.data.recoveryCodes }
}

type ApiKeyScope = components['schemas']['ApiKeyScope']

/**
 * Makes a personal API key for a script (within STEP_UP_MAX_AGE_S of signing in, or after
 * POST /auth/step-up). The key is shown this once: keep it in the script's secret store.
 */
export async function makeApiKey (baseUrl: string, token: string, name: string, scopes: ApiKeyScope[]) {
  const made = await apiClient(baseUrl, token).POST('/account/api-keys', { body: { name, scopes } })
  // STEP_UP_REQUIRED: step up first; API_KEY_LIMIT_REACHED: revoke one of the 20.
  if (made.error) throw new Error(`API key: ${made.error.code}`)
  return { key: made.data.key, id: made.data.data.id, prefix: made.data.data.prefix }
}

/**
 * The API-key mode: what a script does with a key alone, no sign-in. A scope it lacks is 403
 * INSUFFICIENT_SCOPE; an account route 403 API_KEY_NOT_ALLOWED; a dead key 401; past
 * API_KEY_RATE_LIMIT_MAX a minute 429 with Retry-After.
 */
export async function scriptWithApiKey (baseUrl: string, key: string) {
  const api = apiClient(baseUrl, key)
  const created = await api.POST('/tasks', { body: { title: 'Filed by a script' } })
  if (created.error) throw new Error(`create task: ${created.error.code}`)
  const listed = await api.GET('/tasks', { params: { query: { limit: 10 } } })
  if (listed.error) throw new Error(`list tasks: ${listed.error.code}`)
  const account = await api.GET('/account/profile')
  return { task: created.data.data, total: listed.data.total, accountRefusal: account.error?.code }
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
