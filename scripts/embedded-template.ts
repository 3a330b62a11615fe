// Makes the embedded database's template (db/engine/embedded-template.ts) for this build: run by
// `npm run build` and by `npm start`'s build, it does nothing when the template is current.
import { TEMPLATE_DIR } from '../db/engine/embedded-template.js'
import { makeTemplate } from '../db/engine/make-template.js'

const started = performance.now()
if (await makeTemplate(TEMPLATE_DIR)) console.log(`embedded database template made in ${Math.round(performance.now() - started)} ms`)
