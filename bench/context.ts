// What each part of the benchmark (the scenarios, the storm, the soak, the growth series,
// the profile) is handed by bench/run.ts.
import type { Accounts } from './accounts.js'
import type { Ceilings } from './ceilings.js'
import type { Options } from './options.js'
import type { Report } from './report.js'
import type { RequestSets } from './requests.js'
import type { Runs } from './runs.js'
import type { Service } from './service.js'

export interface Bench {
  options: Options
  service: Service
  runs: Runs
  accounts: Accounts
  requests: RequestSets
  ceilings: Ceilings
  report: Report
}
