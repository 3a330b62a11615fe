// The unit files of the 'rest' suite in one process (test/suites.ts says why).
import { runSuite } from '../suites.js'

await runSuite('rest')
