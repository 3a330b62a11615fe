// `npm run openapi`: writes openapi.json from the route schemas (the app's own
// /openapi.json). CI regenerates it and fails when the committed file differs.
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import Fastify from 'fastify'
import fp from 'fastify-plugin'
import serviceApp from '../app.js'
import { serverOptions } from '../server-options.js'
import { loadConfig } from '../config.js'

const target = fileURLToPath(new URL('../openapi.json', import.meta.url))

async function generateOpenApi (): Promise<string> {
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

await writeFile(target, await generateOpenApi())
console.log(`wrote ${target}`)
