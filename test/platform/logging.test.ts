// An error's log line stays bounded whatever the input, and a request's lines carry its id
// (the production log lines of a real process, and their copy shipped to Axiom:
// test/integration/logging.test.ts).
import Fastify from 'fastify'
import t from 'tap'
import { loadConfig } from '../../config.js'
import { MAX_LOGGED_TEXT } from '../../errors.js'
import { serializeError, serverOptions } from '../../server-options.js'
import { TEST_SECRET } from '../support/helper.js'

t.test('an error\'s log line is bounded: clipped message and stack, no echoed fields', async (t) => {
  // What a database error looks like when a megabyte of input reaches it.
  const huge = 'x'.repeat(1_000_000)
  const err = Object.assign(new Error(`invalid input syntax for type timestamp with time zone: "${huge}"`), { code: '22007', detail: huge, where: huge })
  const line = JSON.stringify(serializeError(err))
  t.ok(line.length < 3 * MAX_LOGGED_TEXT, `${line.length} characters`)
  t.match(serializeError(err), { type: 'Error', code: '22007', message: /^invalid input syntax.*… \(1000058 characters\)$/ })
  t.notOk(line.includes('"detail"') || line.includes('"where"'), 'fields that repeat the input are left out')
  t.same(serializeError(new TypeError('short')).message, 'short', 'a short message is kept whole')
})

t.test('a request\'s log lines: the request id on each, at the levels the logger writes, through children and a route\'s own level', async (t) => {
  const lines: string[] = []
  const options = serverOptions(loadConfig({ NODE_ENV: 'test', LOG_LEVEL: 'warn', AUTH_JWT_SECRET: TEST_SECRET }))
  const app = Fastify({ ...options, logger: { ...options.logger as object, stream: { write: (line: string) => { lines.push(line) } } } })
  t.teardown(() => app.close())
  app.get('/quiet', async (request) => {
    request.log.info('not written at warn')
    request.log.debug('nor this')
    return { level: request.log.level }
  })
  app.get('/loud', async (request) => {
    request.log.warn({ password: 'hunter2-secret' }, 'a warning')
    request.log.error({ err: new Error('boom') }, 'an error')
    request.log.child({ eventId: 'evt_1' }).warn('from a child')
    request.log.child({ eventId: 'evt_2' }).info('a child does not write below warn either')
    return {}
  })
  app.get('/raised', async (request) => {
    request.log.level = 'info'
    request.log.info('written once this request asks for info')
    return { level: request.log.level }
  })
  app.get('/bound', async (request) => {
    const log = request.log as typeof request.log & { setBindings: (bindings: Record<string, string>) => void }
    log.setBindings({ trace_id: 'trace-1' })
    log.warn('bound before the first line')
    log.setBindings({ span_id: 'span-1' })
    log.warn('and after it')
    return {}
  })
  app.get('/route-level', { logLevel: 'info' }, async (request) => {
    request.log.info('written: the route logs at info')
    return {}
  })
  await app.ready()
  const written = () => lines.splice(0).map((line) => JSON.parse(line) as Record<string, unknown>)

  const quiet = await app.inject({ method: 'GET', url: '/quiet' })
  t.same(quiet.json(), { level: 'warn' }, 'the request\'s logger reads the server\'s level')
  t.same(written(), [], 'nothing below warn')

  await app.inject({ method: 'GET', url: '/loud', headers: { 'x-request-id': 'req-loud-1' } })
  const loudLines = written()
  t.same(loudLines.map((l) => [l.level, l.msg, l.reqId, l.eventId]), [
    [40, 'a warning', 'req-loud-1', undefined],
    [50, 'an error', 'req-loud-1', undefined],
    [40, 'from a child', 'req-loud-1', 'evt_1']
  ], 'each line with the request id, a child\'s with its own bindings too')
  t.equal(loudLines[0]!.password, '[redacted]', 'redacted as on every line')
  t.match(loudLines[1]!.err, { type: 'Error', message: 'boom' }, 'an error serialized')

  const raised = await app.inject({ method: 'GET', url: '/raised', headers: { 'x-request-id': 'req-raised-1' } })
  t.same(raised.json(), { level: 'info' })
  t.same(written().map((l) => [l.msg, l.reqId]), [['written once this request asks for info', 'req-raised-1']], 'a level raised for one request')
  await app.inject({ method: 'GET', url: '/quiet' })
  t.same(written(), [], 'and for that request alone')

  await app.inject({ method: 'GET', url: '/bound', headers: { 'x-request-id': 'req-bound-1' } })
  t.same(written().map((l) => [l.msg, l.reqId, l.trace_id, l.span_id]), [
    ['bound before the first line', 'req-bound-1', 'trace-1', undefined],
    ['and after it', 'req-bound-1', 'trace-1', 'span-1']
  ], 'bindings added in place (plugins/tracing.ts adds the trace\'s ids so)')

  await app.inject({ method: 'GET', url: '/route-level', headers: { 'x-request-id': 'req-route-1' } })
  t.same(written().map((l) => [l.msg, l.reqId]), [['written: the route logs at info', 'req-route-1']], 'a route\'s own log level')
})
