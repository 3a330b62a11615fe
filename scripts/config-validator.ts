// Writes the configuration's validator as code (config.ts, configValidator): ajv's standalone
// output for ConfigSchema with the options config.ts compiles it with, and the schema's
// fingerprint, into the build's directory (the parent of this file's output). Compiling it took
// ~36 ms of every start (issue 34); loading the written code takes a few. Run as a script, its
// compiled output, by every build of the service: `npm run build`, `npm start`'s
// (scripts/build-changed.ts, when config.ts or this file changed) and the tests'
// (scripts/test.ts), so the tests run what production runs. Its compiled output imports the
// vendored libraries and the compiled config.js: ~0.1 s, where loading config.ts's sources
// through tsx cost ~0.4 s.
import { writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import standalone from 'ajv/dist/standalone/index.js'
import { CONFIG_VALIDATOR_FILE, configAjv, configSchemaHash, configValidatorSchema } from '../config.js'

const ajv = configAjv({ code: { source: true } })
const code = standalone.default(ajv, ajv.compile(configValidatorSchema()))
const outdir = join(dirname(fileURLToPath(import.meta.url)), '..')
writeFileSync(join(outdir, CONFIG_VALIDATOR_FILE), `${code}\nmodule.exports.schemaHash = ${JSON.stringify(configSchemaHash())};\n`)
