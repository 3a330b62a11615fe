// Preloaded into a server process (node --import) by test/integration/tracing.test.ts: as the
// process exits, one line on stderr names the OpenTelemetry packages it loaded. The SDK's
// packages are CommonJS, so require's cache holds them also when they were imported.
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)

process.once('exit', () => {
  const packages = new Set()
  for (const file of Object.keys(require.cache)) {
    const match = /node_modules\/(@opentelemetry\/[^/]+|@fastify\/otel)\//.exec(file)
    if (match !== null) packages.add(match[1])
  }
  process.stderr.write(`tracing packages loaded: ${JSON.stringify([...packages].sort())}\n`)
})
