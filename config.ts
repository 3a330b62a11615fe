// Configuration: the environment, validated once at start-up. A bad value stops the
// process with one line that names the variable (see loadConfig).
import { createHash, randomBytes } from 'node:crypto'
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { join, resolve } from 'node:path'
import proxyAddr from '@fastify/proxy-addr'
import { Ajv, type Options, type ValidateFunction } from 'ajv'
import { Type, type Static, type TObject, type TSchema } from 'typebox'

const TRUST_PROXY_FORMS = 'must be false, the number of proxies in front of the service (1 behind one load balancer), or their addresses or CIDRs, comma-separated (e.g. 10.0.0.0/8)'

const Url = (defaultValue: string) =>
  Type.String({ pattern: '^https?://[^\\s/]+', default: defaultValue, errorMessage: 'must be an http(s) URL' })

/** One setting: the environment variable operators set, and its schema (type, bounds, default, message). */
interface Setting<S extends TSchema = TSchema> { env: string, schema: S }
const setting = <S extends TSchema>(env: string, schema: S): Setting<S> => ({ env, schema })

/** 32 bytes as 64 hex digits, or in base64/base64url (43 characters, a padding `=` allowed): accounts/secret-seal.ts reads it. */
const SEAL_KEY_PATTERN = '^\\s*([0-9a-fA-F]{64}|[A-Za-z0-9+/_-]{43}=?)\\s*$'
const SEAL_KEY_MESSAGE = 'must be 32 random bytes, as 64 hex digits or in base64 (e.g. openssl rand -base64 32)'
const ms = (minimum: number, maximum: number, fallback: number) =>
  Type.Integer({ minimum, maximum, default: fallback, errorMessage: `must be milliseconds from ${minimum} to ${maximum}` })

/**
 * Every setting, once: grouped as the code reads them (`fastify.config.db.poolMax`), each naming
 * its environment variable, its default and, in a comment, its reason. The validated
 * environment schema (ConfigSchema), the config type (AppConfig) and the mapping between them
 * are derived from this; `.env.example` and docs/operations.md are checked against it
 * (test/platform/env-file.test.ts). Empty values are unset (loadConfig).
 */
export const SETTINGS = {
  // Read apart: NODE_ENV becomes nodeEnv and production, OIDC_PROVIDERS the identityProviders list.
  root: {
    nodeEnv: setting('NODE_ENV', Type.String({ default: 'development' })),
    // Sign-in through OpenID Connect providers (docs/identity-providers.md): their ids,
    // comma-separated; each id's OIDC_<ID>_ISSUER, OIDC_<ID>_CLIENT_ID and OIDC_<ID>_CLIENT_SECRET
    // (and optional OIDC_<ID>_NAME) are read by loadConfig. Empty: no provider sign-in.
    oidcProviders: setting('OIDC_PROVIDERS', Type.String({ default: '', pattern: '^[a-z0-9, -]*$', errorMessage: 'must be provider ids (a-z, 0-9, -), comma-separated' }))
  },
  http: {
    port: setting('PORT', Type.Integer({ minimum: 0, maximum: 65535, default: 3002, errorMessage: 'must be a port number (0-65535)' })),
    host: setting('HOST', Type.String({ minLength: 1, default: '127.0.0.1' })),
    // Bounds on every connection (server-options.ts). REQUEST_TIMEOUT_MS: a request, headers and
    // body, must have arrived within 30 s, enough for a 1 MiB body (the limit) at ~35 kB/s, and a
    // client trickling bytes holds its connection 30 s, not forever. CONNECTION_TIMEOUT_MS: a
    // socket silent both ways for 60 s (a client that stopped reading its answer) is closed; it
    // must exceed the slowest handler (a checkout: up to three 10 s provider calls).
    // KEEP_ALIVE_TIMEOUT_MS: idle between requests, 72 s, above the 60 s idle timeout of common
    // load balancers (AWS ALB, nginx upstream keepalive; raise it above yours), so the balancer,
    // not the server, closes an idle connection and never sends a request on one being closed
    // (a 502). MAX_CONNECTIONS: about ten times what one instance has in flight at its measured
    // ceiling (~2k req/s × 50 ms), with room for a balancer's idle pool, while a flood of slow
    // clients stays bounded in sockets and in buffered bodies (up to 1 MiB each); a connection
    // beyond it is closed at once.
    requestTimeoutMs: setting('REQUEST_TIMEOUT_MS', ms(1000, 600_000, 30_000)),
    connectionTimeoutMs: setting('CONNECTION_TIMEOUT_MS', ms(1000, 600_000, 60_000)),
    keepAliveTimeoutMs: setting('KEEP_ALIVE_TIMEOUT_MS', ms(1000, 3_600_000, 72_000)),
    maxConnections: setting('MAX_CONNECTIONS', Type.Integer({ minimum: 1, maximum: 100_000, default: 1024, errorMessage: 'must be an integer from 1 to 100000' })),
    // One client's share of MAX_CONNECTIONS (an IPv6 client's /64 is one client): a browser opens
    // 6 per origin, an office behind one NAT a few dozen; 1,030 idle connections from one address
    // took /health down for everyone. Direct peers only: the trusted proxies (TRUST_PROXY) carry
    // everyone's connections.
    maxConnectionsPerAddress: setting('MAX_CONNECTIONS_PER_ADDRESS', Type.Integer({ minimum: 1, maximum: 100_000, default: 64, errorMessage: 'must be an integer from 1 to 100000' })),
    /** The web client's origin (CORS, links in mail, checkout return pages). */
    appUrl: setting('APP_URL', Url('http://localhost:3000')),
    // Unset: http://localhost:PORT (loadConfig), so /docs and the tokens' audience follow PORT.
    apiUrl: setting('API_URL', Type.Optional(Type.String({ pattern: '^https?://[^\\s/]+', errorMessage: 'must be an http(s) URL' }))),
    /** Extra allowed origins besides appUrl, as given (comma-separated). */
    corsOrigins: setting('CORS_ORIGINS', Type.String({ default: '', description: 'Extra allowed origins besides APP_URL, comma-separated' })),
    // Which peers' X-Forwarded-For is believed (trustProxy below): none, the nearest N hops, or
    // peers at these addresses or CIDRs (also loopback, linklocal, uniquelocal). `true` trusts
    // every entry, the client's own included, and is refused in production.
    trustProxy: setting('TRUST_PROXY', Type.String({ default: 'false', pattern: '^(true|false|\\d+|[0-9a-zA-Z.:/, ]+)$', errorMessage: TRUST_PROXY_FORMS })),
    // SIGTERM (a deploy, an orchestrator's stop) first drains (server.ts): for SHUTDOWN_DRAIN_MS
    // /ready answers 503 while every other request is still served, each answer saying
    // `Connection: close`, so the load balancer takes the instance out of its rotation, and
    // lets go of its kept-alive connections, before the port closes. It must cover the
    // balancer's checks: deploy/haproxy.cfg checks every 500 ms and takes an instance out after
    // 2 failures, so within about 1 s; 2 s leaves as much again for a slow check. While requests
    // still arrive after it the drain goes on, up to three times as long (graceful-close.ts).
    // (An instance that closed at once was sent 270-360 requests per restart on a closed port.)
    // SIGINT (Ctrl-C) closes at once.
    shutdownDrainMs: setting('SHUTDOWN_DRAIN_MS', ms(0, 300_000, 2000)),
    maxEventLoopDelayMs: setting('MAX_EVENT_LOOP_DELAY_MS', Type.Integer({ minimum: 0, default: 1000, errorMessage: 'must be a non-negative integer (0 disables)' }))
  },
  db: {
    url: setting('DATABASE_URL', Type.Optional(Type.String({ pattern: '^postgres(ql)?://', errorMessage: 'must be a postgres:// or postgresql:// URL' }))),
    dataDir: setting('DATA_DIR', Type.String({ minLength: 1, default: './.data' })),
    poolMax: setting('DATABASE_POOL_MAX', Type.Integer({ minimum: 1, maximum: 1000, default: 10, errorMessage: 'must be an integer from 1 to 1000' })),
    connectTimeoutMs: setting('DATABASE_CONNECT_TIMEOUT_MS', ms(100, 60_000, 3000)),
    statementTimeoutMs: setting('DATABASE_STATEMENT_TIMEOUT_MS', ms(100, 600_000, 15_000)),
    // The client's own limit on a query's round trip, for when the network to PostgreSQL goes
    // silent and no answer, error or reset ever comes (db/engine/connect.ts). Unset: a second above the
    // statement timeout, so a slow statement is still cancelled by the server first (its answer
    // takes milliseconds; the second covers a busy event loop) and the connection is kept.
    queryTimeoutMs: setting('DATABASE_QUERY_TIMEOUT_MS', Type.Optional(Type.Integer({ minimum: 100, maximum: 900_000, errorMessage: 'must be milliseconds from 100 to 900000' }))),
    preparedStatements: setting('DATABASE_PREPARED_STATEMENTS', Type.Boolean({ default: true, errorMessage: 'must be true or false' })),
    // What stands between the service and PostgreSQL (db/engine/pooler-check.ts). `none`: PostgreSQL itself
    // or a proxy that keeps each connection's session; the statement timeout is sent when each
    // connection opens. `transaction`: a pooler in transaction mode (PgBouncer's pool_mode =
    // transaction), which refuses or drops that start-up parameter and hands each transaction to
    // whichever server session is free: the timeout must then be set on the role or database,
    // and start-up checks that it is. Either way start-up refuses a pooler that breaks what the
    // service relies on, with one line saying what to set.
    pooler: setting('DATABASE_POOLER', Type.Enum(['none', 'transaction'], { default: 'none', errorMessage: 'must be none or transaction' }))
  },
  auth: {
    // Unset: outside production, generated and kept in DATA_DIR (loadConfig).
    jwtSecret: setting('AUTH_JWT_SECRET', Type.Optional(Type.String({ minLength: 32, errorMessage: 'must be at least 32 characters' }))),
    // bcrypt's cost: 2^rounds iterations. The spec's 12 is the floor in production; tests use 4
    // (a hash in ~1 ms instead of ~300 ms) and opt back in where the cost is the point.
    bcryptRounds: setting('BCRYPT_ROUNDS', Type.Integer({ minimum: 4, maximum: 16, default: 12, errorMessage: 'must be an integer from 4 to 16' })),
    bcryptWorkers: setting('BCRYPT_WORKERS', Type.Optional(Type.Integer({ minimum: 1, maximum: 64, errorMessage: 'must be an integer from 1 to 64' }))),
    bcryptQueueMax: setting('BCRYPT_QUEUE_MAX', Type.Integer({ minimum: 0, maximum: 10_000, default: 64, errorMessage: 'must be an integer from 0 to 10000' })),
    // What adds a way in (linking an identity; next a second factor, passkeys, API keys) needs a
    // session that signed in or stepped up this recently (auth-extensions §6): 10 minutes, long
    // enough to finish an enrolment begun after signing in, short enough that a stolen session
    // token is useless for it unless its thief also knows the password.
    stepUpMaxAgeSeconds: setting('STEP_UP_MAX_AGE_S', Type.Integer({ minimum: 10, maximum: 86_400, default: 600, errorMessage: 'must be seconds from 10 to 86400' })),
    // The key TOTP seeds are sealed with (AES-256-GCM: accounts/secret-seal.ts), and the one it
    // replaced, still read; each seed is sealed again under the current key when next used.
    // Unset outside production: derived from the JWT secret. In production, required once any
    // user has turned two-step sign-in on (plugins/app/second-factor.ts refuses to start without).
    mfaEncryptionKey: setting('MFA_ENCRYPTION_KEY', Type.Optional(Type.String({ pattern: SEAL_KEY_PATTERN, errorMessage: SEAL_KEY_MESSAGE }))),
    mfaEncryptionKeyPrevious: setting('MFA_ENCRYPTION_KEY_PREVIOUS', Type.Optional(Type.String({ pattern: SEAL_KEY_PATTERN, errorMessage: SEAL_KEY_MESSAGE })))
  },
  payments: {
    secretKey: setting('PAYMENT_SECRET_KEY', Type.Optional(Type.String({ minLength: 1 }))),
    webhookSecret: setting('PAYMENT_WEBHOOK_SECRET', Type.Optional(Type.String({ minLength: 1 }))),
    /** The prices a checkout may name, comma-separated (a list once loaded). */
    priceIds: setting('PAYMENT_PRICE_IDS', Type.String({ default: '' })),
    checkoutSuccessUrl: setting('CHECKOUT_SUCCESS_URL', Type.Optional(Type.String({ pattern: '^https?://[^\\s/]+', errorMessage: 'must be an http(s) URL' }))),
    checkoutCancelUrl: setting('CHECKOUT_CANCEL_URL', Type.Optional(Type.String({ pattern: '^https?://[^\\s/]+', errorMessage: 'must be an http(s) URL' }))),
    apiUrl: setting('PAYMENT_API_URL', Type.Optional(Type.String({ pattern: '^https?://', errorMessage: 'must be an http(s) URL' }))),
    timeoutMs: setting('PAYMENT_TIMEOUT_MS', ms(100, 120_000, 10_000)),
    maxRetries: setting('PAYMENT_MAX_RETRIES', Type.Integer({ minimum: 0, maximum: 5, default: 2, errorMessage: 'must be an integer from 0 to 5' })),
    // A provider call a webhook decided on (billing/provider-actions.ts) that failed is tried
    // again after PAYMENT_ACTION_RETRY_BASE_MS, doubling up to an hour, for up to 7 days.
    actionRetryBaseMs: setting('PAYMENT_ACTION_RETRY_BASE_MS', ms(10, 3_600_000, 10_000))
  },
  // Email (plugins/app/mailer.ts): unset SMTP_URL logs each message outside production and
  // keeps them queued in production. The sender polls the outbox every EMAIL_POLL_INTERVAL_MS
  // (and at once after a commit that queued mail), retries a failed message after
  // EMAIL_RETRY_BASE_MS, doubling up to an hour, and gives up EMAIL_GIVE_UP_MS after it was queued.
  email: {
    smtpUrl: setting('SMTP_URL', Type.Optional(Type.String({ pattern: '^smtps?://[^\\s/]+', errorMessage: 'must be an smtp:// or smtps:// URL' }))),
    from: setting('EMAIL_FROM', Type.String({ minLength: 3, maxLength: 255, default: 'Task App <no-reply@localhost>', errorMessage: 'must be an address, e.g. Task App <no-reply@example.com>' })),
    pollIntervalMs: setting('EMAIL_POLL_INTERVAL_MS', ms(100, 3_600_000, 30_000)),
    retryBaseMs: setting('EMAIL_RETRY_BASE_MS', ms(10, 3_600_000, 30_000)),
    giveUpMs: setting('EMAIL_GIVE_UP_MS', ms(1000, 30 * 86_400_000, 86_400_000))
  },
  limits: {
    redisUrl: setting('REDIS_URL', Type.Optional(Type.String({ pattern: '^rediss?://', errorMessage: 'must be a redis:// or rediss:// URL' }))),
    // A Redis command unanswered this long fails, and the limits let the request through
    // (plugins/external/redis.ts): an answer takes well under a millisecond on a healthy network.
    redisCommandTimeoutMs: setting('REDIS_COMMAND_TIMEOUT_MS', ms(10, 10_000, 200)),
    /** One client's requests per window (0: no ceiling). */
    requestsPerWindow: setting('RATE_LIMIT_MAX', Type.Integer({ minimum: 0, default: 600, errorMessage: 'must be a non-negative integer (0 disables)' })),
    /** Sign-in attempts per client, and failed and successful password checks per account, per window. */
    signInMax: setting('AUTH_RATE_LIMIT_MAX', Type.Integer({ minimum: 0, default: 10, errorMessage: 'must be a non-negative integer (0 disables)' })),
    // Requests one API key makes a minute (auth-extensions §5), counted in Redis when REDIS_URL is
    // set so every instance shares the count: a script a key belongs to gets its own budget,
    // apart from its address's RATE_LIMIT_MAX.
    apiKeyPerMinute: setting('API_KEY_RATE_LIMIT_MAX', Type.Integer({ minimum: 0, default: 600, errorMessage: 'must be a non-negative integer (0 disables)' })),
    windowMs: setting('RATE_LIMIT_WINDOW_MS', Type.Integer({ minimum: 1000, default: 60_000, errorMessage: 'must be at least 1000' })),
    // Mails the account routes send one address an hour, links and notices alike (accounts/mail.ts):
    // enough for a person who lost a mail or two, too few to flood an inbox from many clients;
    // past it links are not sent and notices go out as one digest when the hour ends.
    emailLinksPerHour: setting('EMAIL_LINK_MAX_PER_HOUR', Type.Integer({ minimum: 0, maximum: 1000, default: 5, errorMessage: 'must be an integer from 0 to 1000 (0 disables)' })),
    // Idempotency-Key answers kept per user (plugins/app/idempotency.ts): beyond it a user's
    // oldest are forgotten before their 24 hours, by the housekeeping every 10 minutes. A retry
    // comes within seconds or minutes: 1,000 covers a client creating a task every 10 s all day,
    // or one a second for a quarter of an hour, at ~1 KB a row.
    idempotencyKeysPerUser: setting('IDEMPOTENCY_KEYS_PER_USER', Type.Integer({ minimum: 1, maximum: 1_000_000, default: 1000, errorMessage: 'must be an integer from 1 to 1000000' }))
  },
  // GET /metrics (Prometheus text, docs/operations.md): on a port of its own, and/or on the main
  // port for a bearer METRICS_TOKEN. Neither set: no /metrics at all.
  metrics: {
    port: setting('METRICS_PORT', Type.Optional(Type.Integer({ minimum: 0, maximum: 65535, errorMessage: 'must be a port number (0-65535)' }))),
    // The METRICS_PORT server answers without a token, so it listens on loopback unless told
    // otherwise (HOST is 0.0.0.0 in containers, where a scraper in another one needs 0.0.0.0 here too).
    host: setting('METRICS_HOST', Type.String({ minLength: 1, default: '127.0.0.1' })),
    token: setting('METRICS_TOKEN', Type.Optional(Type.String({ minLength: 16, errorMessage: 'must be at least 16 characters' })))
  },
  // Traces (plugins/tracing.ts, docs/operations.md): sent over OTLP/HTTP (JSON) to
  // OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as given, or to OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces,
  // the OpenTelemetry variables any collector's docs name. Neither set: no tracing at all, and no
  // cost (nothing of the SDK is even loaded).
  tracing: {
    /** Once loaded: where spans are sent (the rule above); undefined: tracing off. */
    endpoint: setting('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', Type.Optional(Type.String({ pattern: '^https?://[^\\s/]+', errorMessage: 'must be an http(s) URL' }))),
    baseEndpoint: setting('OTEL_EXPORTER_OTLP_ENDPOINT', Type.Optional(Type.String({ pattern: '^https?://[^\\s/]+', errorMessage: 'must be an http(s) URL' }))),
    serviceName: setting('OTEL_SERVICE_NAME', Type.String({ minLength: 1, default: 'task-subscription-backend' }))
  },
  log: {
    level: setting('LOG_LEVEL', Type.Enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], { default: 'info', errorMessage: 'must be one of fatal, error, warn, info, debug, trace, silent' })),
    axiomToken: setting('LOG_TOKEN', Type.Optional(Type.String())),
    axiomDataset: setting('LOG_DATASET', Type.Optional(Type.String())),
    axiomUrl: setting('LOG_URL', Type.Optional(Type.String({ pattern: '^https?://', errorMessage: 'must be an http(s) URL' })))
  }
} as const

type Groups = typeof SETTINGS
/** A group as its declarations type it: each setting's value, optional where its schema is. */
type Group<G extends Record<string, Setting>> = Static<TObject<{ [K in keyof G]: G[K]['schema'] }>>
type Loaded = { [K in Exclude<keyof Groups, 'root'>]: Group<Groups[K]> }

/** Every setting by its environment variable, as validated (the interface operators use). */
export const ConfigSchema = Type.Object(Object.fromEntries(Object.values(SETTINGS).flatMap((group) =>
  Object.values(group as Record<string, Setting>).map(({ env, schema }) => [env, schema]))))

/**
 * The settings grouped by concern, each plugin reading its own slice (`fastify.config.db`,
 * `.email`, …): the declarations above, with the values resolved here once where a default
 * depends on others.
 */
export type AppConfig = Omit<Loaded, 'http' | 'db' | 'auth' | 'payments'> & {
  nodeEnv: string
  production: boolean
  /** `apiUrl` always set: from API_URL or http://localhost:PORT. */
  http: Loaded['http'] & { apiUrl: string }
  /** `queryTimeoutMs` always set: from DATABASE_QUERY_TIMEOUT_MS or a second above statementTimeoutMs. */
  db: Loaded['db'] & { queryTimeoutMs: number }
  /** `jwtSecret` always set: from AUTH_JWT_SECRET or, outside production, generated and kept in DATA_DIR. */
  auth: Loaded['auth'] & { jwtSecret: string }
  payments: Omit<Loaded['payments'], 'priceIds'> & { priceIds: string[] }
  /** OpenID Connect providers users may sign in with, in the order OIDC_PROVIDERS names them. */
  identityProviders: IdentityProviderConfig[]
}

export interface IdentityProviderConfig {
  /** Ours: in URLs (`/auth/providers/<id>/…`) and in OIDC_<ID>_* names. */
  id: string
  /** For display: OIDC_<ID>_NAME, or the id capitalised. */
  name: string
  issuer: string
  clientId: string
  clientSecret: string
}

export class ConfigError extends Error {
  override name = 'ConfigError'
}

interface AjvLikeError { instancePath: string, keyword: string, params: Record<string, unknown>, message?: string }

function describe (error: AjvLikeError): string {
  const name = error.keyword === 'required'
    ? String(error.params.missingProperty)
    : error.instancePath.replace(/^\//, '')
  const property = (ConfigSchema.properties as Record<string, { errorMessage?: string }>)[name]
  return `${name} ${property?.errorMessage ?? error.message ?? 'is invalid'}`
}

let compiledConfigValidator: ValidateFunction | undefined

/**
 * The ajv that compiles ConfigSchema's validator, with env-schema's options (which this
 * replaced: it made two ajv instances as it loaded and compiled the schema on every call): coerce
 * the text of a variable to the schema's type, fill in defaults, drop unknown variables, report
 * every error. The schema is ours (the config tests hold every setting), so ajv does not first
 * check it against its meta-schema, which would compile that too. `extra`: the build's
 * `code: { source: true }` (scripts/config-validator.ts).
 */
export function configAjv (extra: Options = {}): Ajv {
  return new Ajv({
    allErrors: true,
    removeAdditional: true,
    useDefaults: true,
    coerceTypes: true,
    allowUnionTypes: true,
    addUsedSchema: false,
    validateSchema: false,
    // Our own keyword: the message describe() gives for a setting (setting()'s errorMessage).
    keywords: ['errorMessage'],
    ...extra
  })
}

/** What the validator checks: every setting, nothing else. */
export const configValidatorSchema = () => ({ ...ConfigSchema, additionalProperties: false })

/** The schema's fingerprint: a validator written for another schema is not used. */
export const configSchemaHash = () => createHash('sha256').update(JSON.stringify(configValidatorSchema())).digest('hex')

/** The validator the build writes beside this file's output (scripts/config-validator.ts). */
export const CONFIG_VALIDATOR_FILE = 'config-validator.cjs'

/**
 * ConfigSchema's validator, once per process. Compiling it took ~36 ms of every start (issue
 * 34), so the build writes ajv's code for it beside the output: loaded when it is there and
 * written for this very schema; otherwise (`npm run dev`, from the sources) compiled here.
 */
function configValidator (): ValidateFunction {
  compiledConfigValidator ??= writtenValidator() ?? configAjv().compile(configValidatorSchema())
  return compiledConfigValidator
}

function writtenValidator (): ValidateFunction | undefined {
  let written: ValidateFunction & { schemaHash?: string }
  try {
    written = createRequire(import.meta.url)(`./${CONFIG_VALIDATOR_FILE}`) as typeof written
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'MODULE_NOT_FOUND') return undefined
    throw err
  }
  return written.schemaHash === configSchemaHash() ? written : undefined
}

/**
 * Validates `env` (process.env by default, and only it: a caller's `env` is all that is read)
 * and returns the typed configuration. Throws ConfigError with one readable line naming the
 * first bad variable.
 */
export function loadConfig (env: Record<string, string | undefined> = process.env): AppConfig {
  // Empty strings mean "unset": `FOO= npm start`, or compose's `${FOO:-}`, is not a validation error.
  const data = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ''))
  // Coerced to the schema's types, its defaults filled in, unknown variables dropped.
  const raw: Record<string, unknown> = { ...data }
  const validate = configValidator()
  if (!validate(raw)) {
    const first = validate.errors?.[0]
    throw new ConfigError(`Invalid configuration: ${first === undefined ? 'is invalid' : describe(first)}`)
  }
  const { root, ...groups } = Object.fromEntries(Object.entries(SETTINGS).map(([name, group]) =>
    [name, Object.fromEntries(Object.entries(group as Record<string, Setting>).map(([key, { env: variable }]) => [key, raw[variable]]))])) as Loaded & { root: Group<Groups['root']> }
  const production = root.nodeEnv === 'production'
  if (production && groups.auth.bcryptRounds < 12) {
    throw new ConfigError('Invalid configuration: BCRYPT_ROUNDS must be at least 12 in production')
  }
  checkTrustProxy(groups.http.trustProxy, production)
  if (groups.auth.mfaEncryptionKeyPrevious !== undefined && groups.auth.mfaEncryptionKey === undefined) {
    throw new ConfigError('Invalid configuration: MFA_ENCRYPTION_KEY_PREVIOUS is set without MFA_ENCRYPTION_KEY: set the new key too')
  }
  return {
    ...groups,
    nodeEnv: root.nodeEnv,
    production,
    http: { ...groups.http, apiUrl: groups.http.apiUrl ?? `http://localhost:${groups.http.port}` },
    db: { ...groups.db, queryTimeoutMs: queryTimeout(groups.db) },
    auth: { ...groups.auth, jwtSecret: groups.auth.jwtSecret ?? developmentSecret(production, groups.db.dataDir) },
    payments: { ...groups.payments, priceIds: list(groups.payments.priceIds) },
    tracing: { ...groups.tracing, endpoint: tracesEndpoint(groups.tracing) },
    identityProviders: identityProviders(root.oidcProviders, data)
  }
}

const LOOPBACK = new Set(['127.0.0.1', '[::1]', 'localhost'])

/** Each provider OIDC_PROVIDERS names, from its own OIDC_<ID>_* variables; a missing or bad one stops start-up naming it. */
function identityProviders (ids: string, env: Record<string, string | undefined>): IdentityProviderConfig[] {
  const providers: IdentityProviderConfig[] = []
  for (const id of list(ids)) {
    if (!/^[a-z][a-z0-9-]{0,31}$/.test(id)) throw new ConfigError(`Invalid configuration: OIDC_PROVIDERS names "${id}": an id is a lower-case letter, then up to 31 letters, digits or dashes`)
    if (providers.some((p) => p.id === id)) throw new ConfigError(`Invalid configuration: OIDC_PROVIDERS names "${id}" twice`)
    const prefix = `OIDC_${id.toUpperCase().replaceAll('-', '_')}_`
    const need = (name: string): string => {
      const value = env[prefix + name]
      if (value === undefined || value.trim() === '') throw new ConfigError(`Invalid configuration: ${prefix}${name} is required for provider ${id} (OIDC_PROVIDERS)`)
      return value.trim()
    }
    const issuer = need('ISSUER')
    let url: URL
    try {
      url = new URL(issuer)
    } catch {
      throw new ConfigError(`Invalid configuration: ${prefix}ISSUER must be a URL`)
    }
    // Plain http only to a provider on this machine (tests, local development).
    if (url.protocol !== 'https:' && !(url.protocol === 'http:' && LOOPBACK.has(url.hostname))) {
      throw new ConfigError(`Invalid configuration: ${prefix}ISSUER must be an https URL (http only on this machine)`)
    }
    const name = env[`${prefix}NAME`]?.trim() || id.charAt(0).toUpperCase() + id.slice(1)
    if (name.length > 64) throw new ConfigError(`Invalid configuration: ${prefix}NAME must be at most 64 characters`)
    providers.push({ id, name, issuer, clientId: need('CLIENT_ID'), clientSecret: need('CLIENT_SECRET') })
  }
  return providers
}

function checkTrustProxy (trustProxy: string, production: boolean): void {
  const value = trustProxy.trim()
  if (value === 'true' && production) {
    throw new ConfigError('Invalid configuration: TRUST_PROXY=true believes the X-Forwarded-For entries a client writes itself; set the number of proxies in front of the service (1 behind one load balancer) or their addresses or CIDRs')
  }
  if (value === 'true' || value === 'false' || /^\d+$/.test(value)) return
  try {
    proxyAddr.compile(list(value))
  } catch {
    throw new ConfigError(`Invalid configuration: TRUST_PROXY ${TRUST_PROXY_FORMS}`)
  }
}

function queryTimeout (db: Loaded['db']): number {
  const statement = db.statementTimeoutMs
  if (db.queryTimeoutMs === undefined) return statement + 1000
  if (db.queryTimeoutMs <= statement) {
    throw new ConfigError(`Invalid configuration: DATABASE_QUERY_TIMEOUT_MS must be above DATABASE_STATEMENT_TIMEOUT_MS (${statement}), so the server cancels a slow statement first`)
  }
  return db.queryTimeoutMs
}

// Outside production a missing secret is generated once and kept beside the embedded
// database, so tokens survive restarts with zero configuration.
function developmentSecret (production: boolean, dataDir: string): string {
  if (production) {
    throw new ConfigError('Invalid configuration: AUTH_JWT_SECRET is required in production (at least 32 characters)')
  }
  const dir = resolve(dataDir)
  const file = join(dir, 'jwt-secret')
  try {
    const kept = readFileSync(file, 'utf8').trim()
    if (kept.length >= 32) return kept
  } catch {}
  mkdirSync(dir, { recursive: true })
  const secret = randomBytes(48).toString('base64url')
  writeFileSync(file, secret + '\n', { mode: 0o600 })
  return secret
}

const list = (value: string): string[] => value.split(',').map((item) => item.trim()).filter(Boolean)

/** Origins allowed for CORS and for cookie-authenticated unsafe requests. */
export const allowedOrigins = (config: AppConfig): string[] =>
  [new URL(config.http.appUrl).origin, ...list(config.http.corsOrigins).map((origin) => new URL(origin).origin)]

/** Whether the peer `hop` steps away (0: the socket's peer, 1: the right-most X-Forwarded-For entry, …) is a proxy of ours. */
export type TrustProxy = (address: string, hop: number) => boolean

/**
 * The proxies of TRUST_PROXY, as a function Fastify's trustProxy takes: false (none), every
 * hop (`true`, outside production only), the nearest N hops, or peers at the given addresses
 * and CIDRs. The client is the first address, from the socket outward, that is not a proxy:
 * the right-most X-Forwarded-For entry our proxies did not write. (Fastify itself ignores a
 * hop count given as a number, so every client would be the balancer.)
 */
export function trustProxy (config: AppConfig): TrustProxy | false {
  const value = config.http.trustProxy.trim()
  if (value === 'false' || value === '0') return false
  if (value === 'true') return () => true
  if (/^\d+$/.test(value)) {
    const hops = Number(value)
    return (_address, hop) => hop < hops
  }
  return proxyAddr.compile(list(value))
}

/** Where spans are sent, or undefined when tracing is off (OpenTelemetry's rule: the signal's own endpoint as given, else the base one + /v1/traces). */
function tracesEndpoint ({ endpoint, baseEndpoint }: Loaded['tracing']): string | undefined {
  if (endpoint !== undefined) return endpoint
  if (baseEndpoint === undefined) return undefined
  return `${baseEndpoint.replace(/\/+$/, '')}/v1/traces`
}

/**
 * Where the provider returns a payer after checkout: the origin web client's billing page
 * unless CHECKOUT_SUCCESS_URL / CHECKOUT_CANCEL_URL say otherwise.
 */
export function checkoutReturnUrls (config: AppConfig): { successUrl: string, cancelUrl: string } {
  const billingPage = `${config.http.appUrl.replace(/\/+$/, '')}/dashboard/billing`
  return {
    successUrl: config.payments.checkoutSuccessUrl ?? `${billingPage}?success=true`,
    cancelUrl: config.payments.checkoutCancelUrl ?? `${billingPage}?canceled=true`
  }
}
