// `npm run openapi`: writes openapi.json from the route schemas (the app's own
// /openapi.json). `--check` fails when the committed file is stale (CI runs it).
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import Fastify from 'fastify'
import fp from 'fastify-plugin'
import serviceApp from '../app.js'
import { serverOptions } from '../server-options.js'
import { loadConfig } from '../schemas/config.js'

const target = fileURLToPath(new URL('../openapi.json', import.meta.url))

export async function generateOpenApi (): Promise<string> {
  // A throwaway embedded database: the app migrates one at start-up.
  const dataDir = await mkdtemp(join(tmpdir(), 'openapi-'))
  try {
    // Fixed values, so the document does not depend on who generates it.
    const config = loadConfig({ NODE_ENV: 'test', LOG_LEVEL: 'silent', DATA_DIR: dataDir, AUTH_JWT_SECRET: 'x'.repeat(32), API_URL: 'http://localhost:3002' })
    const app = Fastify(serverOptions(config))
    app.register(fp(serviceApp), { config })
    await app.ready()
    const document = JSON.stringify(app.swagger(), null, 2) + '\n'
    await app.close()
    return document
  } finally {
    await rm(dataDir, { recursive: true, force: true })
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const document = await generateOpenApi()
  if (process.argv.includes('--check')) {
    const committed = await readFile(target, 'utf8').catch(() => '')
    if (committed !== document) {
      console.error('openapi.json is stale: run `npm run openapi` and commit the result')
      process.exit(1)
    }
    console.log('openapi.json is up to date')
  } else {
    await writeFile(target, document)
    console.log(`wrote ${target}`)
  }
}
