// Debian's Chromium driven by playwright-core, for the browser tests of `npm run test:integration`
// (the API reference page, provider sign-in; passkeys next). It needs /usr/bin/chromium
// (`apt-get install chromium`, as .ci/run does), or CHROMIUM_PATH.
import { existsSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { chromium, type BrowserContext, type Page } from 'playwright-core'

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'
const CHROMIUM_ARGS = [
  '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'
]

interface Teardown { teardown: (fn: () => unknown) => void }

/**
 * A headless Chromium on a fresh profile, closed at teardown, as if offline: a request to a URL
 * `reachable` refuses fails with `internetdisconnected` (tests report those it saw).
 */
export async function launchChromium (t: Teardown, reachable: (url: URL) => boolean, options: { viewport?: { width: number, height: number } } = {}): Promise<{ context: BrowserContext, page: Page }> {
  if (!existsSync(CHROMIUM)) throw new Error(`no Chromium at ${CHROMIUM}: apt-get install chromium (or set CHROMIUM_PATH)`)
  const profile = await mkdtemp(join(tmpdir(), 'tsb-chromium-profile-'))
  t.teardown(() => rm(profile, { recursive: true, force: true }))
  // A persistent context on a fresh profile directory is how playwright takes --user-data-dir.
  const context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS, ...options })
  t.teardown(() => context.close())
  await context.route((url) => !reachable(url), (route) => route.abort('internetdisconnected'))
  const page = context.pages()[0] ?? await context.newPage()
  return { context, page }
}
