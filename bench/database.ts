// The database a benchmark run gets to itself, created for the run and removed after it: a
// fresh PostgreSQL database on the given server, or a fresh PGlite data directory.
import { mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import pg from 'pg'
import type { CleanUps } from './cleanup.js'
import { log } from './log.js'
import type { DbKind } from './types.js'

export interface BenchDatabase {
  kind: DbKind
  /** PostgreSQL: the benchmark database's URL. */
  url: string | undefined
  /** PGlite: the data directory. */
  dataDir: string | undefined
  /** PostgreSQL: the database's name (its server processes count as the benchmark's). */
  name: string | undefined
  /** `select version()`, or `PGlite (embedded)`. */
  version: string
}

/** What tells the service (or the database ceiling) where its database is. */
export const databaseEnv = (database: BenchDatabase): NodeJS.ProcessEnv =>
  database.url === undefined ? { DATA_DIR: database.dataDir } : { DATABASE_URL: database.url }

export async function createDatabase (kind: DbKind, serverUrl: string, cleanups: CleanUps): Promise<BenchDatabase> {
  if (kind === 'pglite') {
    const dataDir = mkdtempSync(path.join(os.tmpdir(), 'bench-pglite-'))
    log(`embedded database in ${dataDir}`)
    cleanups.add(() => rmSync(dataDir, { recursive: true, force: true }))
    return { kind, url: undefined, dataDir, name: undefined, version: 'PGlite (embedded)' }
  }
  const name = `bench_${Date.now()}_${process.pid}`
  const admin = new pg.Client({ connectionString: serverUrl })
  await admin.connect()
  const version = (await admin.query<{ v: string }>('select version() as v')).rows[0]?.v ?? ''
  await admin.query(`create database ${name}`)
  await admin.end()
  const url = new URL(serverUrl)
  url.pathname = `/${name}`
  log(`database ${name} on ${url.host}`)
  cleanups.add(async () => {
    const client = new pg.Client({ connectionString: serverUrl })
    await client.connect()
    await client.query(`drop database if exists ${name} with (force)`)
    await client.end()
  })
  return { kind, url: url.toString(), dataDir: undefined, name, version }
}
