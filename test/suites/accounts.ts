// The unit files of the 'accounts' suite in one process (test/suites.ts says why).
import { runSuite } from '../suites.js'

await runSuite('accounts')
