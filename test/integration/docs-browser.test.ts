// The API reference page in a real browser: server.ts as a child process, Debian's
// Chromium driven by playwright-core. The page must render every task and billing
// operation of the document, load nothing from any host but ours (no CDN, fonts or
// telemetry), break no Content-Security-Policy rule, and send a request from its
// built-in client. Screenshots go to test/integration/docs.png and docs-request.png.
//
// Part of `npm run test:integration`, not of `npm test`. It needs /usr/bin/chromium (`apt-get install chromium`), or CHROMIUM_PATH.
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { BrowserContext, Page } from 'playwright-core'
import t, { type Test } from 'tap'
import { launchChromium } from '../support/chromium.js'
import { PROJECT_ROOT } from '../support/paths.js'
import { freePort, startServer, waitUntilUp } from './process.js'

const LOCAL_HOSTS = new Set(['127.0.0.1', 'localhost', '[::1]'])
const SCREENSHOT = join(PROJECT_ROOT, 'test', 'integration', 'docs.png')
const REQUEST_SCREENSHOT = join(PROJECT_ROOT, 'test', 'integration', 'docs-request.png')

async function tempDir (t: Test, label: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), `tsb-docs-${label}-`))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  return dir
}

/** server.ts on a free port with a fresh embedded database and billing configured. */
async function startDocsServer (t: Test): Promise<string> {
  const port = await freePort()
  const base = `http://127.0.0.1:${port}`
  const server = startServer({
    LOG_LEVEL: 'warn',
    HOST: '127.0.0.1',
    PORT: String(port),
    DATA_DIR: await tempDir(t, 'data'),
    AUTH_JWT_SECRET: 'browser-test-secret-that-is-long-enough-0123',
    PAYMENT_SECRET_KEY: 'sk_test_docs',
    // The document's server, which the page's client sends requests to: this server.
    API_URL: base
  })
  t.teardown(async () => {
    if (server.child.exitCode !== null || server.child.signalCode !== null) return
    server.child.kill('SIGTERM')
    const timer = setTimeout(() => server.child.kill('SIGKILL'), 10_000)
    await server.exited
    clearTimeout(timer)
  })
  await waitUntilUp(server)
  return base
}

const isLocal = (url: URL) => url.protocol === 'data:' || url.protocol === 'blob:' || LOCAL_HOSTS.has(url.hostname)

/** Chromium as if offline: a request to any other host fails (and is reported below). */
const launch = (t: Test): Promise<{ context: BrowserContext, page: Page }> => launchChromium(t, isLocal, { viewport: { width: 1400, height: 900 } })

interface Operation { method: string, path: string, summary: string }

/** The task and billing operations, as the service's own document lists them. */
async function documentedOperations (base: string): Promise<Map<string, Operation[]>> {
  const doc = await (await fetch(`${base}/openapi.json`)).json() as {
    paths: Record<string, Record<string, { summary?: string, tags?: string[] }>>
  }
  const byTag = new Map<string, Operation[]>([['tasks', []], ['billing', []]])
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, operation] of Object.entries(item)) {
      for (const tag of operation.tags ?? []) {
        if (operation.summary !== undefined) byTag.get(tag)?.push({ method, path, summary: operation.summary })
      }
    }
  }
  return byTag
}

t.test('GET /docs renders the API reference offline and its client sends a request', async (t) => {
  const base = await startDocsServer(t)
  const { page } = await launch(t)

  const requested: string[] = []
  const problems: string[] = []
  page.on('request', (request) => { requested.push(request.url()) })
  page.on('pageerror', (err) => { problems.push(`page error: ${err.message}`) })
  page.on('console', (message) => {
    // A blocked script, style, font, image or fetch is reported on the console.
    if (/Content Security Policy/i.test(message.text())) problems.push(`CSP: ${message.text()}`)
  })

  // On a loaded machine (the other integration files run beside this one) the service may shed
  // load with 503 + Retry-After while it starts up: a browser's user reloads, and so does this.
  let response = await page.goto(`${base}/docs`)
  for (let tries = 1; response?.status() === 503 && tries < 10; tries++) {
    await new Promise((resolve) => setTimeout(resolve, 1000))
    response = await page.goto(`${base}/docs`)
  }
  t.equal(response?.status(), 200, 'the page loads without a token')
  t.equal(new URL(page.url()).pathname, '/docs/', '/docs redirects to /docs/')

  // Scalar renders after fetching /openapi.json; the sidebar then lists every operation.
  const sidebar = page.getByLabel(/^Sidebar for /)
  await sidebar.getByText('Create a task', { exact: true }).waitFor({ timeout: 30_000 })

  const operations = await documentedOperations(base)
  for (const [tag, expected] of operations) {
    t.ok(expected.length >= 2, `the document has ${tag} operations`)
    for (const { method, path, summary } of expected) {
      t.ok(await sidebar.getByText(summary, { exact: true }).first().isVisible(), `listed: ${method.toUpperCase()} ${path} (${summary})`)
    }
  }
  const summaries = [...operations.values()].flat().map((operation) => operation.summary)
  for (const summary of ["List the caller's tasks, newest first", 'Create a task', 'Start a subscription checkout', 'Payment provider webhook']) {
    t.ok(summaries.includes(summary), `the document names "${summary}"`)
  }

  // The task list operation in the main column: its error envelopes are documented.
  await sidebar.getByText("List the caller's tasks, newest first", { exact: true }).click()
  const listTasks = page.getByRole('heading', { name: "List the caller's tasks, newest first" })
  await listTasks.waitFor()
  await page.waitForTimeout(500)
  await page.screenshot({ path: SCREENSHOT })

  // One request from the page's own client: GET /health, a public route.
  await sidebar.getByText('Liveness', { exact: true }).click()
  await page.getByRole('button', { name: /Test Request\s*\(get \/health\)/ }).click()
  const send = page.getByRole('button', { name: /^Send get request to / })
  await send.waitFor()
  const [health] = await Promise.all([
    page.waitForResponse((res) => new URL(res.url()).pathname === '/health'),
    send.click()
  ])
  t.equal(health.status(), 200, 'the client called GET /health')
  t.equal(await health.text(), 'OK', 'the server answered OK')
  // The client's response pane: the status line, and the body in its (CodeMirror) text box.
  const client = page.getByRole('dialog')
  await client.getByText('200 OK', { exact: true }).waitFor()
  await client.getByRole('textbox').filter({ hasText: /^OK$/ }).waitFor()
  t.pass('the client shows 200 OK and the body OK')
  await page.screenshot({ path: REQUEST_SCREENSHOT })

  t.ok(requested.length >= 4, 'the page made its requests', { requested })
  const foreign = requested.filter((url) => !isLocal(new URL(url)))
  t.same(foreign, [], 'every request went to this server')
  t.same(problems, [], 'no script error and no CSP violation')
})
