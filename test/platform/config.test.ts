// Configuration as loadConfig reads it: each bad value is one line naming the variable
// (test/integration/server.test.ts checks that such a line stops the real process).
import { createRequire } from 'node:module'
import t from 'tap'
import type { ValidateFunction } from 'ajv'
import { CONFIG_VALIDATOR_FILE, configAjv, configSchemaHash, configValidatorSchema, ConfigError, loadConfig, SETTINGS } from '../../config.js'
import { TEST_SECRET } from '../support/helper.js'

const refusal = (env: Record<string, string>): string => {
  try {
    loadConfig({ AUTH_JWT_SECRET: TEST_SECRET, ...env })
  } catch (err) {
    if (err instanceof ConfigError) return err.message
    throw err
  }
  return 'accepted'
}

t.test('BCRYPT_ROUNDS: 12 by default, 4 to 16, at least 12 in production', async (t) => {
  t.equal(loadConfig({ AUTH_JWT_SECRET: TEST_SECRET }).auth.bcryptRounds, 12)
  t.equal(loadConfig({ AUTH_JWT_SECRET: TEST_SECRET, BCRYPT_ROUNDS: '4' }).auth.bcryptRounds, 4)
  t.equal(loadConfig({ AUTH_JWT_SECRET: TEST_SECRET, NODE_ENV: 'production', BCRYPT_ROUNDS: '13' }).auth.bcryptRounds, 13)
  t.equal(refusal({ BCRYPT_ROUNDS: '3' }), 'Invalid configuration: BCRYPT_ROUNDS must be an integer from 4 to 16')
  t.equal(refusal({ BCRYPT_ROUNDS: '17' }), 'Invalid configuration: BCRYPT_ROUNDS must be an integer from 4 to 16')
  t.equal(refusal({ BCRYPT_ROUNDS: '10', NODE_ENV: 'production' }), 'Invalid configuration: BCRYPT_ROUNDS must be at least 12 in production')
})

t.test('a bad value is one line naming the variable', async (t) => {
  t.equal(refusal({ AUTH_JWT_SECRET: 'x'.repeat(31) }), 'Invalid configuration: AUTH_JWT_SECRET must be at least 32 characters')
  t.equal(refusal({ DATABASE_URL: 'mysql://localhost/db' }), 'Invalid configuration: DATABASE_URL must be a postgres:// or postgresql:// URL')
  t.equal(refusal({ PORT: '70000' }), 'Invalid configuration: PORT must be a port number (0-65535)')
  t.equal(refusal({ DATABASE_STATEMENT_TIMEOUT_MS: '5000', DATABASE_QUERY_TIMEOUT_MS: '5000' }),
    'Invalid configuration: DATABASE_QUERY_TIMEOUT_MS must be above DATABASE_STATEMENT_TIMEOUT_MS (5000), so the server cancels a slow statement first')
  t.equal(refusal({ AUTH_JWT_SECRET: '', NODE_ENV: 'production' }), 'Invalid configuration: AUTH_JWT_SECRET is required in production (at least 32 characters)')
})

t.test('TRUST_PROXY: a hop count or proxy addresses; `true` only outside production', async (t) => {
  t.equal(refusal({ TRUST_PROXY: '1', NODE_ENV: 'production' }), 'accepted')
  t.equal(refusal({ TRUST_PROXY: '10.0.0.0/8, 192.168.1.7, loopback', NODE_ENV: 'production' }), 'accepted')
  t.equal(refusal({ TRUST_PROXY: 'true' }), 'accepted', 'development: every entry trusted, as asked')
  t.equal(refusal({ TRUST_PROXY: 'true', NODE_ENV: 'production' }),
    'Invalid configuration: TRUST_PROXY=true believes the X-Forwarded-For entries a client writes itself; set the number of proxies in front of the service (1 behind one load balancer) or their addresses or CIDRs')
  for (const bad of ['10.0.0.300', '10.0.0.0/33', 'balancer.internal', '-1']) {
    t.equal(refusal({ TRUST_PROXY: bad }),
      'Invalid configuration: TRUST_PROXY must be false, the number of proxies in front of the service (1 behind one load balancer), or their addresses or CIDRs, comma-separated (e.g. 10.0.0.0/8)', bad)
  }
})

t.test('API_URL follows PORT unless set', async (t) => {
  t.equal(loadConfig({ AUTH_JWT_SECRET: TEST_SECRET }).http.apiUrl, 'http://localhost:3002')
  t.equal(loadConfig({ AUTH_JWT_SECRET: TEST_SECRET, PORT: '8080' }).http.apiUrl, 'http://localhost:8080', 'the API reference and token audience point at the port served')
  t.equal(loadConfig({ AUTH_JWT_SECRET: TEST_SECRET, PORT: '8080', API_URL: 'https://api.example.com' }).http.apiUrl, 'https://api.example.com')
})

t.test('traces go where the OpenTelemetry variables say; neither endpoint set: tracing is off', async (t) => {
  const endpoint = (env: Record<string, string>) => loadConfig({ AUTH_JWT_SECRET: TEST_SECRET, ...env }).tracing.endpoint
  t.equal(endpoint({}), undefined)
  t.equal(endpoint({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }), 'http://collector:4318/v1/traces', 'the base endpoint + the signal path')
  t.equal(endpoint({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/otlp/' }), 'http://collector:4318/otlp/v1/traces')
  t.equal(endpoint({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://traces.example.com/ingest' }),
    'https://traces.example.com/ingest', "the signal's own endpoint as given")
  t.equal(loadConfig({ AUTH_JWT_SECRET: TEST_SECRET }).tracing.serviceName, 'task-subscription-backend')
  t.equal(refusal({ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' }), 'Invalid configuration: OTEL_EXPORTER_OTLP_ENDPOINT must be an http(s) URL')
})

t.test('OIDC_PROVIDERS: each id\'s own variables, checked at start-up', async (t) => {
  const google = { OIDC_GOOGLE_ISSUER: 'https://accounts.google.com', OIDC_GOOGLE_CLIENT_ID: 'client-1', OIDC_GOOGLE_CLIENT_SECRET: 'secret-1' }
  t.same(loadConfig({ AUTH_JWT_SECRET: TEST_SECRET }).identityProviders, [], 'none by default')
  const okta = { OIDC_MY_OKTA_ISSUER: 'https://example.okta.com', OIDC_MY_OKTA_CLIENT_ID: 'client-2', OIDC_MY_OKTA_CLIENT_SECRET: 'secret-2', OIDC_MY_OKTA_NAME: 'Company SSO' }
  t.same(loadConfig({ AUTH_JWT_SECRET: TEST_SECRET, OIDC_PROVIDERS: 'google, my-okta', ...google, ...okta }).identityProviders, [
    { id: 'google', name: 'Google', issuer: 'https://accounts.google.com', clientId: 'client-1', clientSecret: 'secret-1' },
    { id: 'my-okta', name: 'Company SSO', issuer: 'https://example.okta.com', clientId: 'client-2', clientSecret: 'secret-2' }
  ], 'in order, a dash read as _ in the names, the display name defaulting to the id capitalised')
  const refused = (env: Record<string, string>, message: RegExp, what: string) =>
    t.throws(() => loadConfig({ AUTH_JWT_SECRET: TEST_SECRET, OIDC_PROVIDERS: 'google', ...google, ...env }), message, what)
  refused({ OIDC_GOOGLE_CLIENT_SECRET: '' }, /^Invalid configuration: OIDC_GOOGLE_CLIENT_SECRET is required for provider google/, 'a missing secret')
  refused({ OIDC_GOOGLE_ISSUER: 'http://idp.example.com' }, /OIDC_GOOGLE_ISSUER must be an https URL/, 'plain http to another host')
  refused({ OIDC_GOOGLE_ISSUER: 'not a url' }, /OIDC_GOOGLE_ISSUER must be a URL/, 'not a URL')
  refused({ OIDC_PROVIDERS: 'google,google' }, /names "google" twice/, 'twice')
  refused({ OIDC_PROVIDERS: 'Google' }, /OIDC_PROVIDERS must be provider ids/, 'upper case')
  t.equal(loadConfig({ AUTH_JWT_SECRET: TEST_SECRET, OIDC_PROVIDERS: 'google', ...google, OIDC_GOOGLE_ISSUER: 'http://127.0.0.1:9000' }).identityProviders[0]!.issuer,
    'http://127.0.0.1:9000', 'http on this machine (tests, development)')
})

/** Runs `fn` with `vars` set in this process's environment (as a shell or compose would set them), restored after. */
function withShell<T> (vars: Record<string, string>, fn: () => T): T {
  const before = Object.fromEntries(Object.keys(vars).map((name) => [name, process.env[name]]))
  Object.assign(process.env, vars)
  try {
    return fn()
  } finally {
    for (const [name, value] of Object.entries(before)) {
      if (value === undefined) delete process.env[name]
      else process.env[name] = value
    }
  }
}

t.test('loadConfig(env) reads env and nothing else: the shell\'s variables, empty or bad, play no part', async (t) => {
  const config = withShell({ PORT: 'not a port', PAYMENT_SECRET_KEY: '', SMTP_URL: 'ftp://nope', EMAIL_FROM: '' }, () => loadConfig({ AUTH_JWT_SECRET: TEST_SECRET }))
  t.equal(config.http.port, 3002, 'the default, not the shell\'s PORT')
  t.equal(config.email.smtpUrl, undefined)
  t.equal(config.email.from, 'Task App <no-reply@localhost>')
})

t.test('an empty value is unset, for every setting, as compose passes NAME: "$NAME:-" (empty when unset)', async (t) => {
  const dir = t.testdir()
  const names = Object.values(SETTINGS).flatMap((group) => Object.values(group).map((setting) => setting.env))
  t.equal(names.length, new Set(names).size, 'each setting declared once')
  for (const name of names) {
    // The process's own environment, as server.ts reads it: the empty variable is in it.
    t.doesNotThrow(() => withShell({ [name]: '' }, () => loadConfig({ ...process.env, AUTH_JWT_SECRET: TEST_SECRET, DATA_DIR: dir, [name]: '' })), `${name}=`)
  }
  const allEmpty = Object.fromEntries(names.map((name) => [name, '']))
  const config = withShell(allEmpty, () => loadConfig({ ...process.env, AUTH_JWT_SECRET: TEST_SECRET, NODE_ENV: 'production' }))
  t.match(config, { production: true, http: { port: 3002 }, payments: { secretKey: undefined, priceIds: [] }, email: { from: 'Task App <no-reply@localhost>' } },
    'all of them empty at once, in production: the defaults')
})

// The build writes the validator as code beside config.js (scripts/config-validator.ts), which
// loadConfig uses when it was written for this schema: this build's, so the tests above ran it.
t.test('the validator the build wrote is for this schema, and judges as ajv compiling it does', async (t) => {
  const written = createRequire(import.meta.url)(`../../${CONFIG_VALIDATOR_FILE}`) as ValidateFunction & { schemaHash: string }
  t.equal(written.schemaHash, configSchemaHash())
  const compiled = configAjv().compile(configValidatorSchema())
  const envs: Array<Record<string, string>> = [
    {},
    { PORT: '8080', DATABASE_POOL_MAX: '4', DATABASE_PREPARED_STATEMENTS: 'false', UNKNOWN_VARIABLE: 'dropped' },
    { PORT: 'eighty', BCRYPT_ROUNDS: '99', APP_URL: 'ftp://x', LOG_LEVEL: 'loud' },
    { AUTH_JWT_SECRET: 'short', TRUST_PROXY: '10.0.0.0/8, 1', DATABASE_POOLER: 'session' }
  ]
  for (const env of envs) {
    const [a, b] = [{ ...env }, { ...env }]
    t.same([written(a), a, written.errors], [compiled(b), b, compiled.errors], JSON.stringify(env))
  }
})
