// What each part of the benchmark (the scenarios, the storm, the soak, the growth series,
// the profile) is handed by bench/run.ts.
import type { Ceilings } from './ceilings.js'
import type { Report } from './report.js'
import type { RequestSets } from './requests.js'
import type { Runs } from './runs.js'
import type { Service } from './service.js'
import type { Accounts, Options } from './types.js'

export interface Bench {
  options: Options
  service: Service
  runs: Runs
  accounts: Accounts
  requests: RequestSets
  ceilings: Ceilings
  report: Report
}
