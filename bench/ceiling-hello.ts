// Framework ceilings, started by bench/ceilings.ts in a child process: a bare Fastify hello-world
// (no plugins, no hooks, no logger) and, with RESPONSE_HEADERS set (JSON), the same bare
// route answering exactly what GET /health answers: those headers (captured from the
// service) and a text/plain `OK`. The second tells what the headers themselves cost, apart
// from everything else the service does per request.
import Fastify from 'fastify'

const headers = process.env.RESPONSE_HEADERS === undefined ? undefined : JSON.parse(process.env.RESPONSE_HEADERS) as Record<string, string>
const app = Fastify({ logger: false })
if (headers === undefined) app.get('/', async () => ({ hello: 'world' }))
else app.get('/', (_request, reply) => { reply.headers(headers).type('text/plain; charset=utf-8').send('OK') })
await app.listen({ port: Number(process.env.PORT), host: '127.0.0.1' })
process.on('SIGTERM', () => { app.close().then(() => process.exit(0), () => process.exit(1)) })
