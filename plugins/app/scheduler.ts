// The background jobs of this process (jobs/scheduler.ts): other plugins add theirs (the mail
// sender, purges); all start once the app is ready and stop before the database closes.
import fp from 'fastify-plugin'
import { Scheduler } from '../../jobs/scheduler.js'

declare module 'fastify' {
  interface FastifyInstance {
    jobs: Scheduler
  }
}

export default fp(async function scheduler (fastify) {
  const jobs = new Scheduler(fastify.log)
  fastify.decorate('jobs', jobs)
  fastify.addHook('onReady', async () => { jobs.start() })
  // preClose runs before any onClose hook, so the database is still open while jobs finish.
  fastify.addHook('preClose', async () => { await jobs.stop() })
}, { name: 'scheduler', dependencies: ['db'] })
