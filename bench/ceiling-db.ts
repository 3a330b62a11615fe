// Database ceiling: a bare Fastify route (no plugins, no schemas, no logging, no Kysely at
// request time) running exactly the statements GET /tasks runs — the same SQL text, taken
// from the service's prepared queries, as named statements on PostgreSQL, with timestamps
// read by the same decoder — with plain `pg` (pool 10), or the embedded database when
// DATABASE_URL is unset. It verifies the HS256 token with node:crypto, then, as the service
// does: on a PostgreSQL server, one statement that reads the token's holder (the revocation
// check folded in) beside the first page of their tasks and the counts, as the JSON text the
// statement joins from the tasks' stored answers, sent as it is; on the embedded database,
// where the service keeps the holders it read until the database says they changed
// (accounts/holder-cache.ts), the holder once per token and then only the page's statement.
// Started by bench/ceilings.ts in a child process.
import { createHmac, timingSafeEqual } from 'node:crypto'
import { resolve } from 'node:path'
import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify'
import pg from 'pg'
import { earliestTokenIat } from '../db/users.js'
import { pgliteParsers, pgTypes, SESSION_SETTINGS } from '../db/engine/timestamps.js'
import { statement } from './statements.js'

type Row = Record<string, unknown>
type Query = (name: string, params: Record<string, unknown>) => Promise<Row[]>

const secret = process.env.AUTH_JWT_SECRET ?? ''
const issuer = process.env.APP_URL ?? 'http://localhost:3000'
const audience = process.env.API_URL ?? 'http://localhost:3002'
/** The statement's SQL and its values in $n order, from named parameters. */
const bound = (name: string, params: Record<string, unknown>): { text: string, values: unknown[] } => {
  const { sql, params: order } = statement(name)
  return { text: sql, values: order.map((param) => params[param]) }
}

async function connect (): Promise<{ query: Query, close: () => Promise<void> }> {
  if (process.env.DATABASE_URL) {
    const pool = new pg.Pool({
      connectionString: process.env.DATABASE_URL,
      max: 10,
      types: pgTypes
    })
    pool.on('connect', (client) => { client.query(SESSION_SETTINGS).catch(() => {}) })
    return { query: async (name, params) => (await pool.query({ name, ...bound(name, params) })).rows, close: () => pool.end() }
  }
  const { PGlite } = await import('@electric-sql/pglite')
  const db = await PGlite.create(resolve(process.env.DATA_DIR ?? './.data', 'pglite'), { parsers: pgliteParsers })
  return {
    query: async (name, params) => {
      const { text, values } = bound(name, params)
      return (await db.query<Row>(text, values)).rows
    },
    close: () => db.close()
  }
}

interface Claims { sub: string, jti: string, iat: number, exp: number, iss: string, aud: string }

function verify (token: string): Claims | undefined {
  const [header, payload, signature] = token.split('.')
  if (header === undefined || payload === undefined || signature === undefined) return undefined
  const expected = createHmac('sha256', secret).update(`${header}.${payload}`).digest()
  const given = Buffer.from(signature, 'base64url')
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return undefined
  const alg = (JSON.parse(Buffer.from(header, 'base64url').toString()) as { alg?: string }).alg
  const claims = JSON.parse(Buffer.from(payload, 'base64url').toString()) as Claims
  if (alg !== 'HS256' || claims.iss !== issuer || claims.aud !== audience || !(claims.exp * 1000 > Date.now())) return undefined
  if (typeof claims.sub !== 'string' || typeof claims.jti !== 'string') return undefined
  return claims
}

const { query, close } = await connect()
const app = Fastify({ logger: false })
const holders = new Map<string, Row>()

app.get('/ready', async () => 'OK')
app.get('/tasks', async (request: FastifyRequest, reply: FastifyReply) => {
  const match = /^Bearer (\S+)$/.exec(request.headers.authorization ?? '')
  const claims = match?.[1] === undefined ? undefined : verify(match[1])
  if (claims === undefined) return reply.code(401).send({ success: false, error: 'Unauthorized' })
  const unauthorized = (user: Row | undefined) => user === undefined || claims.iat < earliestTokenIat(user as { password_changed_at: string | null })
  const send = (page: Row) => {
    const { total, todo, in_progress: inProgress, completed, size, data } = page as { total: number, todo: number, in_progress: number, completed: number, size: number, data: string | null }
    reply.header('x-total-count', total)
    reply.type('application/json; charset=utf-8')
    return `{"success":true,"data":[${size === 0 ? '' : data!}],"total":${total},"todo":${todo},"inProgress":${inProgress},"completed":${completed}}`
  }
  const params = { userId: claims.sub, jti: claims.jti, iat: claims.iat, limit: 1000, offset: 0 }
  if (process.env.DATABASE_URL) {
    // On a PostgreSQL server the service's one statement checks the token and joins the page
    // (db/tasks.ts, tasks_page_json_for_token): one row, the holder's columns, the counts and
    // the page's JSON text; no row when the token does not hold.
    const [page] = await query('tasks_page_json_for_token', params)
    if (unauthorized(page)) return reply.code(401).send({ success: false, error: 'Unauthorized' })
    return send(page!)
  }
  // On the embedded database: the holder read once per token (a ceiling has no revocation to
  // hear of), then the page's statement alone.
  let user = holders.get(claims.jti)
  if (user === undefined) {
    [user] = await query('user_for_token', { userId: claims.sub, jti: claims.jti })
    if (user !== undefined) holders.set(claims.jti, user)
  }
  if (unauthorized(user)) return reply.code(401).send({ success: false, error: 'Unauthorized' })
  const [page] = await query('tasks_page_json', params)
  return send(page!)
})

await app.listen({ port: Number(process.env.PORT), host: '127.0.0.1' })
process.on('SIGTERM', () => {
  app.close().then(close).then(() => process.exit(0), () => process.exit(1))
})
