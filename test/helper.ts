// Builds the real app for a test file, with the same server options as server.ts and
// a database of its own: a copy of the migrated PGlite template, or a fresh database
// on the PostgreSQL server named by DATABASE_URL.
import { randomUUID } from 'node:crypto'
import { cp, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Fastify, { type FastifyInstance, type LightMyRequestResponse } from 'fastify'
import fp from 'fastify-plugin'
import pg from 'pg'
import serviceApp, { serverOptions } from '../app.js'
import { loadConfig, type AppConfig } from '../schemas/config.js'
import { enforceContract } from './contract.js'
import { templateDataDir } from './paths.js'

export const TEST_SECRET = 'test-secret-that-is-long-enough-0123456789'

interface Teardown { teardown: (fn: () => unknown) => void }

/** A database for one test file; removed at teardown. */
export async function testDatabaseEnv (t: Teardown): Promise<Record<string, string>> {
  const serverUrl = process.env.DATABASE_URL
  if (serverUrl) {
    const name = `test_${randomUUID().replaceAll('-', '')}`
    const admin = new pg.Client({ connectionString: serverUrl })
    await admin.connect()
    await admin.query(`create database ${name}`)
    await admin.end()
    t.teardown(async () => {
      const client = new pg.Client({ connectionString: serverUrl })
      await client.connect()
      await client.query(`drop database if exists ${name} with (force)`)
      await client.end()
    })
    const url = new URL(serverUrl)
    url.pathname = `/${name}`
    return { DATABASE_URL: url.toString() }
  }
  const dataDir = await mkdtemp(join(tmpdir(), 'tsb-test-'))
  await cp(templateDataDir(), dataDir, { recursive: true })
  t.teardown(() => rm(dataDir, { recursive: true, force: true }))
  return { DATA_DIR: dataDir }
}

export async function testConfig (t: Teardown, env: Record<string, string> = {}): Promise<AppConfig> {
  return loadConfig({
    NODE_ENV: 'test',
    LOG_LEVEL: 'silent',
    AUTH_JWT_SECRET: TEST_SECRET,
    // Most files register many users from one address, and a busy CI machine must not shed
    // their requests; test/hardening.test.ts turns the limits and load shedding on.
    RATE_LIMIT_MAX: '0',
    AUTH_RATE_LIMIT_MAX: '0',
    MAX_EVENT_LOOP_DELAY_MS: '0',
    ...await testDatabaseEnv(t),
    ...env
  })
}

/**
 * The app exactly as server.ts builds it, ready, closed at teardown. Its inject() checks
 * every response against the app's OpenAPI document (test/contract.ts).
 */
export async function build (t: Teardown, env: Record<string, string> = {}, config?: AppConfig): Promise<FastifyInstance> {
  const appConfig = config ?? await testConfig(t, env)
  const app = Fastify(serverOptions(appConfig))
  app.register(fp(serviceApp), { config: appConfig })
  t.teardown(() => app.close())
  await app.ready()
  enforceContract(app)
  return app
}

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

export const json = (res: LightMyRequestResponse) => res.json() as Record<string, any>
