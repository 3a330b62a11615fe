// The statement helper the repositories use: db/engine/prepared.ts with our tables (db/types.ts).
import { queryPreparer } from './engine/prepared.js'
import type { Database } from './types.js'

export type { PreparedStatement } from './engine/prepared.js'

/** A hot query compiled once at start-up; see db/engine/prepared.ts. */
export const prepareQuery = queryPreparer<Database>()
