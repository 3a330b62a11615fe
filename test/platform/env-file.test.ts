// `.env`: read by npm start, npm run dev and npm run migrate only, below the environment
// (env-file.ts); `.env.example` lists every setting loadConfig reads, each with a value it accepts.
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { parseEnv } from 'node:util'
import t from 'tap'
import { ConfigSchema, loadConfig } from '../../config.js'
import { loadEnvFile } from '../../env-file.js'
import { PROJECT_ROOT } from '../support/paths.js'

// Each setting is a commented-out line `# NAME=value`, so a copy changes nothing until edited.
const exampleLines = () => readFileSync(join(PROJECT_ROOT, '.env.example'), 'utf8')
  .split('\n').filter((line) => /^# [A-Z][A-Z0-9_]*=/.test(line)).map((line) => line.slice(2))

t.test('.env.example names every setting, once, and nothing else', async (t) => {
  const named = exampleLines().map((line) => line.slice(0, line.indexOf('=')))
  t.same([...named].sort(), Object.keys(ConfigSchema.properties).sort(), 'the settings of config.ts')
  t.equal(new Set(named).size, named.length, 'each once')
})

t.test('.env.example, every line uncommented, is a configuration loadConfig accepts', async (t) => {
  const values = parseEnv(exampleLines().join('\n'))
  t.equal(values.EMAIL_FROM, 'Task App <no-reply@localhost>', 'a trailing comment is not part of a value')
  t.equal(values.HOST, '127.0.0.1', 'nor is the blank before it')
  const config = loadConfig({ ...values, DATA_DIR: t.testdir() })
  t.equal(config.http.port, 3002)
  t.equal(config.db.queryTimeoutMs, 16_000, 'the default it states')
})

t.test('.env is read under npm start, npm run dev and npm run migrate, below the environment', async (t) => {
  const dir = t.testdir()
  const file = join(dir, '.env')
  writeFileSync(file, 'ENV_FILE_TEST_FROM_FILE=file\nENV_FILE_TEST_BOTH=file\n')
  t.teardown(() => {
    delete process.env.ENV_FILE_TEST_FROM_FILE
    delete process.env.ENV_FILE_TEST_BOTH
  })

  for (const script of ['test', 'bench', 'test:fleet', undefined]) {
    t.equal(loadEnvFile(file, { npm_lifecycle_event: script }), false, `not under ${script === undefined ? 'a process npm did not start' : `npm run ${script}`}`)
  }
  t.equal(process.env.ENV_FILE_TEST_FROM_FILE, undefined, 'nothing read')
  t.equal(loadEnvFile(join(dir, 'missing.env'), { npm_lifecycle_event: 'start' }), false, 'no file: nothing to read, no error')

  process.env.ENV_FILE_TEST_BOTH = 'environment'
  t.equal(loadEnvFile(file, { npm_lifecycle_event: 'start' }), true, 'npm start reads it')
  t.equal(process.env.ENV_FILE_TEST_FROM_FILE, 'file', 'a setting from the file')
  t.equal(process.env.ENV_FILE_TEST_BOTH, 'environment', 'the environment wins')
  for (const script of ['dev', 'migrate']) t.equal(loadEnvFile(file, { npm_lifecycle_event: script }), true, `npm run ${script} reads it`)
})

/** The settings a Markdown table names in its first column: every `UPPER_CASE` name in backticks there. */
const namedInTable = (file: string, heading: RegExp): string[] => {
  const text = readFileSync(join(PROJECT_ROOT, file), 'utf8')
  const section = text.slice(text.search(heading)).split(/\n#{1,3} /)[0]!
  return section.split('\n').filter((line) => line.startsWith('| `'))
    .flatMap((line) => [...line.split('|')[1]!.matchAll(/`([A-Z][A-Z0-9_]*)`/g)].map((match) => match[1]!))
}

t.test('docs/operations.md\'s configuration table gives every setting; the README\'s names only settings', async (t) => {
  const settings = Object.keys(ConfigSchema.properties).sort()
  t.same([...new Set(namedInTable('docs/operations.md', /^## Configuration/m))].sort(), settings, 'every setting of config.ts, each with its default and reason')
  const inReadme = namedInTable('README.md', /^## Configuration/m)
  t.ok(inReadme.length > 10, 'the README has its table of essentials')
  t.same(inReadme.filter((name) => !settings.includes(name)), [], 'no name there that is no setting')
})
