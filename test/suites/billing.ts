// The unit files of the 'billing' suite in one process (test/suites.ts says why).
import { runSuite } from '../suites.js'

await runSuite('billing')
