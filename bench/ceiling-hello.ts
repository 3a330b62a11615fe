// Framework ceiling: a bare Fastify hello-world, started by bench/run.ts in a child process.
import Fastify from 'fastify'

const app = Fastify({ logger: false })
app.get('/', async () => ({ hello: 'world' }))
await app.listen({ port: Number(process.env.PORT), host: '127.0.0.1' })
process.on('SIGTERM', () => { app.close().then(() => process.exit(0), () => process.exit(1)) })
