// Builds the real app for a test, with the same server options as server.ts and
// a database of its own: a copy of the migrated PGlite template, or a fresh database
// on the PostgreSQL server named by DATABASE_URL.
import { createHmac, randomInt, randomUUID } from 'node:crypto'
import { execFile } from 'node:child_process'
import { existsSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import Fastify, { type FastifyInstance, type LightMyRequestResponse } from 'fastify'
import fp from 'fastify-plugin'
import pg from 'pg'
import tap from 'tap'
import serviceApp from '../../app.js'
import { serverOptions } from '../../server-options.js'
import { loadConfig, type AppConfig } from '../../config.js'
import { enforceContract } from './contract.js'
import { templateDataDir } from './paths.js'

export const TEST_SECRET = 'test-secret-that-is-long-enough-0123456789'

const execFileAsync = promisify(execFile)
// Test databases live in memory where the system has a RAM disk: copied and written faster.
const scratchDir = existsSync('/dev/shm') ? '/dev/shm' : tmpdir()

interface Teardown { teardown: (fn: () => unknown) => void }

export interface ServerDatabase {
  /** The URL of the new database. */
  url: URL
  name: string
  /** A connection to the server's maintenance database (for pg_terminate_backend and the like). */
  admin: pg.Client
}

/**
 * A fresh database on a real PostgreSQL server (DATABASE_URL's, or the local one),
 * dropped at teardown.
 */
export async function serverDatabase (t: Teardown, prefix = 'test'): Promise<ServerDatabase> {
  const serverUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres'
  const name = `${prefix}_${randomUUID().replaceAll('-', '')}`
  const admin = new pg.Client({ connectionString: serverUrl })
  await admin.connect()
  await admin.query(`create database ${name}`)
  t.teardown(async () => {
    await admin.query(`drop database if exists ${name} with (force)`)
    await admin.end()
  })
  const url = new URL(serverUrl)
  url.pathname = `/${name}`
  return { url, name, admin }
}

/** One statement on the server's maintenance database, on a connection of its own. */
async function onServer (serverUrl: string, statement: string): Promise<void> {
  const client = new pg.Client({ connectionString: serverUrl })
  await client.connect()
  try {
    await client.query(statement)
  } finally {
    await client.end()
  }
}

/**
 * A database for one app; removed at teardown. On PostgreSQL every app the suites build holds
 * its own pool while its suite runs: with three suites at a time, apps of 10 connections plus
 * a kept maintenance connection each went past the server's default max_connections (100:
 * "sorry, too many clients already", CI on 2026-11-26). An app's pool is 3 unless a test says
 * otherwise (none of these tests holds more than two at once), and the maintenance connection
 * lives only for the create and the drop.
 */
export async function testDatabaseEnv (t: Teardown): Promise<Record<string, string>> {
  if (!process.env.DATABASE_URL) return embeddedDatabaseEnv(t)
  const serverUrl = process.env.DATABASE_URL
  const name = `test_${randomUUID().replaceAll('-', '')}`
  await onServer(serverUrl, `create database ${name}`)
  t.teardown(() => onServer(serverUrl, `drop database if exists ${name} with (force)`))
  const url = new URL(serverUrl)
  url.pathname = `/${name}`
  return { DATABASE_URL: url.toString(), DATABASE_POOL_MAX: '3' }
}

/** A copy of the migrated embedded database, also when DATABASE_URL is set; removed at teardown. */
export async function embeddedDatabaseEnv (t: Teardown): Promise<{ DATA_DIR: string }> {
  const dataDir = await mkdtemp(join(scratchDir, 'tsb-test-'))
  // cp(1): a tenth of the time of fs.cp for the template's thousand small files.
  await execFileAsync('cp', ['-R', `${templateDataDir()}/.`, dataDir])
  t.teardown(() => rm(dataDir, { recursive: true, force: true }))
  return { DATA_DIR: dataDir }
}

export async function testConfig (t: Teardown, env: Record<string, string> = {}, database = testDatabaseEnv): Promise<AppConfig> {
  return loadConfig({
    NODE_ENV: 'test',
    LOG_LEVEL: 'silent',
    AUTH_JWT_SECRET: TEST_SECRET,
    // Most files register many users from one address (and ask for many links to one inbox),
    // and a busy CI machine must not shed their requests; test/accounts/rate-limits.test.ts and
    // test/platform/shedding.test.ts turn the limits and load shedding on.
    RATE_LIMIT_MAX: '0',
    AUTH_RATE_LIMIT_MAX: '0',
    EMAIL_LINK_MAX_PER_HOUR: '0',
    MAX_EVENT_LOOP_DELAY_MS: '0',
    // A 4-round hash takes ~1 ms; files that test the cost itself set 12 again.
    BCRYPT_ROUNDS: '4',
    ...await database(t),
    ...env
  })
}

/**
 * The app exactly as server.ts builds it, ready, closed at teardown. Its inject() checks
 * every response against the app's OpenAPI document (test/support/contract.ts).
 */
export async function build (t: Teardown, env: Record<string, string> = {}, config?: AppConfig): Promise<FastifyInstance> {
  const appConfig = config ?? await testConfig(t, env)
  const app = Fastify(serverOptions(appConfig))
  enforceContract(app)
  app.register(fp(serviceApp), { config: appConfig })
  t.teardown(() => app.close())
  await app.ready()
  return app
}

/** As build(), with the app's log lines kept in `lines` (set LOG_LEVEL in `env` to choose which). */
export async function buildKeepingLog (t: Teardown, env: Record<string, string>, lines: string[]): Promise<FastifyInstance> {
  const config = await testConfig(t, env)
  const options = serverOptions(config)
  const app = Fastify({ ...options, logger: { ...options.logger as object, stream: { write: (line: string) => { lines.push(line) } } } })
  enforceContract(app)
  app.register(fp(serviceApp), { config })
  t.teardown(() => app.close())
  await app.ready()
  return app
}

const sharedApps = new Map<string, Promise<FastifyInstance>>()

/**
 * One app per distinct setting for the whole process, closed when it ends: tests that need
 * the same configuration share it instead of building their own (a build costs a database
 * copy and a second or so). Under `npm test` a process runs a folder's files
 * (test/support/suite.ts), so files share it too. Tests sharing one must not depend on its state.
 */
export function sharedApp (env: Record<string, string> = {}): Promise<FastifyInstance> {
  const key = JSON.stringify(Object.entries(env).sort())
  let app = sharedApps.get(key)
  if (app === undefined) {
    app = build(tap, env)
    sharedApps.set(key, app)
  }
  return app
}

/** Polls `condition` every 50 ms until it holds; after `timeoutMs` fails, naming `what`. */
export async function until (condition: () => Promise<boolean> | boolean, what: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!await condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

/** A client address of its own, so tests (and parallel runs sharing Redis) never share rate-limit counters. */
export const randomAddress = () => `10.${randomInt(256)}.${randomInt(256)}.${randomInt(1, 255)}`

/** A sign-in with a wrong password from `remoteAddress`. */
export const failedLogin = (app: FastifyInstance, email: string, remoteAddress: string, headers: Record<string, string> = {}) =>
  app.inject({ method: 'POST', url: '/auth/login', remoteAddress, headers, payload: { email, password: 'not the password' } })

export const uniqueEmail = (label = 'user') => `${label}-${randomUUID().slice(0, 8)}@example.com`

export interface TestUser { id: string, email: string, password: string, token: string, auth: { authorization: string } }

export async function registerUser (app: FastifyInstance, overrides: { email?: string, password?: string, name?: string } = {}): Promise<TestUser> {
  const email = overrides.email ?? uniqueEmail()
  const password = overrides.password ?? 'correct horse battery'
  const res = await app.inject({ method: 'POST', url: '/auth/register', payload: { email, password, name: overrides.name ?? 'Test User' } })
  if (res.statusCode !== 201) throw new Error(`register failed: ${res.statusCode} ${res.body}`)
  const body = res.json()
  return { id: body.user.id, email, password, token: body.token, auth: { authorization: `Bearer ${body.token}` } }
}

/**
 * registerUser, with the address confirmed as its owner would confirm it (the emailed link):
 * what adds a way in or a factor needs it (accounts/new-way-in.ts).
 */
export async function verifiedUser (app: FastifyInstance, overrides: { email?: string, password?: string, name?: string } = {}): Promise<TestUser> {
  const user = await registerUser(app, overrides)
  await confirmAddress(app, user.id)
  return user
}

/** The user's address confirmed, as by the emailed link (for tests about something else). */
export async function confirmAddress (app: FastifyInstance, userId: string): Promise<void> {
  await app.db.updateTable('users').set({ email_verified: new Date() }).where('id', '=', userId).execute()
}

export const json = (res: LightMyRequestResponse) => res.json() as Record<string, any>

/** Every scope an API key can hold (docs/api-keys.md), written here apart from the service's list. */
export const ALL_KEY_SCOPES = ['tasks:read', 'tasks:write', 'preferences:read', 'preferences:write']

/**
 * Makes an API key for `user` (whose session just signed in: fresh for the step-up), from an
 * address of its own; `body` adds to or replaces the name and the scopes (all of them).
 */
export async function createApiKey (app: FastifyInstance, user: TestUser, body: Record<string, unknown> = {}): Promise<{ id: string, key: string, data: Record<string, any> }> {
  const res = await app.inject({ method: 'POST', url: '/account/api-keys', headers: user.auth, remoteAddress: randomAddress(), payload: { name: 'deploy script', scopes: ALL_KEY_SCOPES, ...body } })
  if (res.statusCode !== 201) throw new Error(`create: ${res.statusCode} ${res.body}`)
  const created = json(res)
  return { id: created.data.id, key: created.key, data: created.data }
}

const b64url = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')

/** A token signed elsewhere with only the documented claims (docs/api.md, "Tokens"), for `app`'s issuer and audience: no session row. */
export function externalToken (app: FastifyInstance, user: { id: string, email: string }, iat = Math.floor(Date.now() / 1000)): string {
  const input = `${b64url({ alg: 'HS256', typ: 'JWT' })}.${b64url({
    sub: user.id, email: user.email, iss: app.config.http.appUrl, aud: app.config.http.apiUrl, iat, exp: iat + 3600, jti: randomUUID()
  })}`
  return `${input}.${createHmac('sha256', TEST_SECRET).update(input).digest('base64url')}`
}
