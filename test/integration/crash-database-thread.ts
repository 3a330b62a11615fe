// Loaded into a server under test (node --import): SIGWINCH, which servers ignore, ends
// the embedded database's thread as a crash would.
import { lastDatabaseThread } from '../support/database-thread.js'

process.on('SIGWINCH', () => { lastDatabaseThread().terminate().catch(() => {}) })
