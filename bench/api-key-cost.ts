// What a personal API key costs GET /tasks beside a session token (auth-extensions §5: "as cheap
// as a JWT"): the readers sign in again (a key is made only from a fresh session) and each
// makes a key with tasks:read; then --pairs interleaved pairs of runs over the same readers,
// one with their tokens and one with their keys, the order alternating. The median pair by
// ratio is reported: throughput and CPU per request of the key over the token's.
// Target: ≥ 95 % of the throughput, ≤ 105 % of the CPU per request.
import type { Bench } from './context.js'
import { login } from './accounts.js'
import { describe, log, step } from './log.js'
import { bearer, JSON_HEADERS } from './requests.js'
import type { ApiKeyCost } from './report.js'
import { medianPair, roundRatio, type Measured } from './runs.js'
import { emailOf } from './seed.js'

/** Each reader's key (tasks:read), made from a fresh sign-in; null when the service has no API keys (an older build). */
async function readersKeys (url: string, readers: number): Promise<string[] | null> {
  const keys: string[] = []
  for (let i = 1; i <= readers; i++) {
    const token = await login(url, emailOf(i))
    const res = await fetch(`${url}/account/api-keys`, {
      method: 'POST',
      headers: { ...JSON_HEADERS, ...bearer(token) },
      body: JSON.stringify({ name: 'bench', scopes: ['tasks:read'] })
    })
    if (res.status === 404) return null
    const body = await res.json() as { key?: string }
    if (res.status !== 201 || typeof body.key !== 'string') throw new Error(`making an API key: ${res.status} ${JSON.stringify(body)}`)
    keys.push(body.key)
  }
  return keys
}

export async function runApiKeyCost ({ options, service, runs, requests, accounts, report }: Bench): Promise<void> {
  const { pairs, settings } = options
  step(`API key cost: GET /tasks with the readers' session tokens and with their API keys, ${pairs} interleaved pair(s)`)
  const keys = await readersKeys(service.url, settings.readers)
  if (keys === null) {
    log('  skipped: this build has no API keys')
    return
  }
  const measured: Array<{ token: Measured, key: Measured, ratio: number }> = []
  for (let i = 1; i <= pairs; i++) {
    measured.push(await runs.stable(`API key pair ${i}/${pairs}`, async () => {
      const withToken = () => runs.measure('tasks.list, session token', [requests.listTasks('', accounts.readerTokens)])
      const withKey = () => runs.measure('tasks.list, API key', [requests.listTasks('', keys)])
      // Alternating which goes first, so a machine warming or cooling favours neither.
      let token: Measured
      let key: Measured
      if (i % 2 === 1) {
        token = await withToken()
        key = await withKey()
      } else {
        key = await withKey()
        token = await withToken()
      }
      describe('session token', token)
      describe('API key', key)
      return { token, key, ratio: token.result.rps > 0 ? key.result.rps / token.result.rps : 0 }
    }, (p) => Math.max(p.token.others ?? 0, p.key.others ?? 0)))
  }
  const { median, ratios } = medianPair(measured, 'API key/token')
  const cpuRatio = median.token.cpuUs !== null && median.key.cpuUs !== null && median.token.cpuUs > 0 ? roundRatio(median.key.cpuUs / median.token.cpuUs) : null
  const cost: ApiKeyCost = {
    tokenRps: median.token.result.rps,
    keyRps: median.key.result.rps,
    ratio: roundRatio(median.ratio),
    tokenCpuUs: median.token.cpuUs,
    keyCpuUs: median.key.cpuUs,
    cpuRatio,
    pairRatios: ratios
  }
  report.apiKeyCost = cost
  report.row('tasks.list, session token', { ...median.token.result, cpuUs: median.token.cpuUs }, median.token.rssMB, median.token.eventLoop?.p99 ?? null, '', null, median.token.others)
  report.row('tasks.list, API key', { ...median.key.result, cpuUs: median.key.cpuUs }, median.key.rssMB, median.key.eventLoop?.p99 ?? null, 'session token', cost.ratio, median.key.others)
  for (const p of measured) report.errors += p.token.result.errors + p.key.result.errors
}
