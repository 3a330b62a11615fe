// Database ceiling: a bare Fastify route (no plugins, no schemas, no logging) running the
// SQL that GET /tasks needs with plain `pg` (pool 10) — or the embedded database when
// DATABASE_URL is unset — and verifying the HS256 token with node:crypto: load the user
// named by the token (the revocation check folded in, as the service does), then the
// first page of their tasks and their count. Started by bench/run.ts in a child process.
import { createHmac, timingSafeEqual } from 'node:crypto'
import { resolve } from 'node:path'
import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify'
import pg from 'pg'

type Row = Record<string, unknown>
type Query = (text: string, params: unknown[]) => Promise<Row[]>

const secret = process.env.AUTH_JWT_SECRET ?? ''
const issuer = process.env.APP_URL ?? 'http://localhost:3000'
const audience = process.env.API_URL ?? 'http://localhost:3002'

async function connect (): Promise<{ query: Query, close: () => Promise<void> }> {
  if (process.env.DATABASE_URL) {
    const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 10 })
    return { query: async (text, params) => (await pool.query(text, params)).rows, close: () => pool.end() }
  }
  const { PGlite } = await import('@electric-sql/pglite')
  const db = await PGlite.create(resolve(process.env.DATA_DIR ?? './.data', 'pglite'))
  return { query: async (text, params) => (await db.query<Row>(text, params)).rows, close: () => db.close() }
}

interface Claims { sub: string, jti: string, ver: number, exp: number, iss: string, aud: string }

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

const iso = (d: unknown): string | null => d instanceof Date ? d.toISOString() : d === null ? null : String(d)

const { query, close } = await connect()
const app = Fastify({ logger: false })

app.get('/ready', async () => 'OK')
app.get('/tasks', async (request: FastifyRequest, reply: FastifyReply) => {
  const match = /^Bearer (\S+)$/.exec(request.headers.authorization ?? '')
  const claims = match?.[1] === undefined ? undefined : verify(match[1])
  if (claims === undefined) return reply.code(401).send({ success: false, error: 'Unauthorized' })
  const [user] = await query('select * from "users" where "id" = $1 and not exists (select 1 as "one" from "revoked_tokens" where "jti" = $2)', [claims.sub, claims.jti])
  if (user === undefined || user.token_version !== claims.ver) return reply.code(401).send({ success: false, error: 'Unauthorized' })
  const [rows, count] = await Promise.all([
    query('select * from "tasks" where "user_id" = $1 order by "created_at" desc, "id" desc limit $2 offset $3', [claims.sub, 50, 0]),
    query('select count(*)::int as "total" from "tasks" where "user_id" = $1', [claims.sub])
  ])
  reply.header('x-total-count', count[0]?.total)
  return {
    success: true,
    data: rows.map((row) => ({
      id: row.id,
      title: row.title,
      description: row.description,
      status: row.status,
      dueDate: iso(row.due_date),
      completedAt: iso(row.completed_at),
      createdAt: iso(row.created_at),
      updatedAt: iso(row.updated_at)
    }))
  }
})

await app.listen({ port: Number(process.env.PORT), host: '127.0.0.1' })
process.on('SIGTERM', () => {
  app.close().then(close).then(() => process.exit(0), () => process.exit(1))
})
