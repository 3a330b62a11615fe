// The unit files of the 'tasks' suite in one process (test/suites.ts says why).
import { runSuite } from '../suites.js'

await runSuite('tasks')
