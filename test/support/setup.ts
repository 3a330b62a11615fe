// Runs once before tap (scripts/test.ts, for every test command): builds the migrated embedded
// database that each app's database copies, unless this version of it exists already (the
// build's template maker, db/engine/make-template.ts, under a name of the suite's own).
import { makeTemplate } from '../../db/engine/make-template.js'
import { templateDataDir } from './paths.js'

if (!process.env.DATABASE_URL) await makeTemplate(templateDataDir())
