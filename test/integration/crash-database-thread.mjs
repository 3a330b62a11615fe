// Loaded into a server under test (node --import): SIGWINCH, which servers ignore, ends
// the embedded database's thread as a crash would. Plain JavaScript that registers tsx
// itself: under tap, a TypeScript file given to --import is not always seen by tsx's hooks.
import { register } from 'tsx/esm/api'

register()
const { lastDatabaseThread } = await import('../database-thread.ts')
process.on('SIGWINCH', () => { lastDatabaseThread().terminate().catch(() => {}) })
