// Initialises a fresh data directory for the embedded database, in a process of its own
// (db/engine/pglite-thread.ts starts it, with PGLITE_INIT = {"dataDir", "settings"} in its
// environment). initdb leaves ~100 MB behind in the memory allocator's arenas: a thread that
// ends keeps them in the server's resident memory for good, a process gives them back.
import { PGlite } from '@electric-sql/pglite'

interface InitRequest { dataDir: string, settings: string[] }

// No top-level await: under tsx (development, tests) this file is loaded with require().
async function initialise ({ dataDir, settings }: InitRequest): Promise<void> {
  const pglite = await PGlite.create(dataDir, {
    startParams: [...PGlite.defaultStartParams, ...settings.flatMap((setting) => ['-c', setting])]
  })
  await pglite.close()
}

initialise(JSON.parse(process.env.PGLITE_INIT ?? 'null') as InitRequest).catch((err: unknown) => {
  // PGlite's file system errors are plain objects ({"name":"ErrnoError","errno":54}).
  console.error(err instanceof Error ? err.message : typeof err === 'object' ? JSON.stringify(err) : String(err))
  process.exitCode = 1
})
