// The caller's tasks. Another user's task is indistinguishable from a missing one (404).
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from 'typebox'
import {
  createTask, createTaskForKey, createTaskForToken, deleteTaskForUser, findTaskForUser, listTasks, listTasksForKey, listTasksForToken, PAGE_BYTES,
  replaceTaskForUser, updateTaskForUser
} from '../../db/tasks.js'
import { errorResponses, ref, Success } from '../../schemas/common.js'
import { TaskNotFoundError } from '../../errors.js'
import { CreateTaskBody, DeletedTask, ListTasksQuery, TaskIdParams, TaskList, TaskResponse, UpdateTaskBody } from '../../schemas/tasks.js'

/** The same list from `offset` on: the same filter and limit (RFC 8288 resolves the path against the request's URL). */
function nextPage (path: string, query: ListTasksQuery, offset: number): string {
  const params = new URLSearchParams()
  if (query.status !== undefined) params.set('status', query.status)
  if (query.limit !== undefined) params.set('limit', String(query.limit))
  params.set('offset', String(offset))
  return `${path}?${params.toString()}`
}

// What an API key needs here (a session holds every scope): docs/api-keys.md.
const READ = ['tasks:read']
const WRITE = ['tasks:write']

const tasks: FastifyPluginAsyncTypebox = async (fastify) => {
  const { db } = fastify

  fastify.get('', {
    // Pages run up to PAGE_BYTES: the pages of a user whose pages are heavy (past an eighth of
    // that) are built one at a time (plugins/app/user-turns.ts).
    // The page's statement checks the token or the API key too (one round trip).
    config: { scopes: READ, answersPerUser: 1, linedAfterBytes: PAGE_BYTES / 8, tokenInStatement: true, keyInStatement: true },
    schema: {
      tags: ['tasks'],
      operationId: 'listTasks',
      summary: 'List the caller\'s tasks, newest first',
      description: 'Without `limit`, up to 1,000 tasks (every task of a normal user). Beside `data`: `total` (tasks matching ' +
        'the filter, also in the `X-Total-Count` header) and the caller\'s task counts by status, whatever the filter and page. ' +
        `A page also ends before its tasks' JSON would pass ${PAGE_BYTES / 2 ** 10} KiB (it always holds one task): when more ` +
        'tasks match than the page holds, `nextOffset` and a `Link: <…>; rel="next"` header say where the next page starts.',
      querystring: ListTasksQuery,
      response: {
        200: {
          ...ref(TaskList),
          headers: {
            'x-total-count': Type.Integer({ description: 'Tasks matching the filter, ignoring limit and offset' }),
            link: Type.Optional(Type.String({ description: 'The next page (`rel="next"`), when more tasks match than this page holds' }))
          }
        }
      }
    }
  }, async (request, reply) => {
    const { data, counts, nextOffset } = await request.authenticatedBy(
      (token) => listTasksForToken(db, token, request.query),
      (userId) => listTasks(db, userId, request.query),
      (key) => listTasksForKey(db, key, request.query))
    reply.header('x-total-count', counts.total)
    if (nextOffset !== undefined) reply.header('link', `<${nextPage(request.routeOptions.url ?? '/tasks', request.query, nextOffset)}>; rel="next"`)
    // The answer as text around the page PostgreSQL joined from the tasks' stored answers
    // (db/tasks.ts): Fastify sends a string with a JSON content type as it is, so
    // fast-json-stringify is not run over what is JSON already. The response schema above stays
    // the contract (the tests validate every answer against it); the keys are TaskList's, in its
    // order, and every value put in here is an integer. (`as never`: the type provider types
    // send() as the schema's object.)
    const body = `{"success":true,"data":${data},"total":${counts.total},"todo":${counts.todo},` +
      `"inProgress":${counts.inProgress},"completed":${counts.completed}` +
      `${nextOffset === undefined ? '' : `,"nextOffset":${nextOffset}`}}`
    return reply.type('application/json; charset=utf-8').send(body as never)
  })

  fastify.post('', {
    // With an Idempotency-Key, the task and the kept answer commit together (request.db), and
    // the hook checks the credential; without one, the task's statement does (one round trip).
    config: { scopes: WRITE, idempotent: 'transaction', tokenInStatement: true, keyInStatement: true },
    schema: {
      tags: ['tasks'],
      operationId: 'createTask',
      summary: 'Create a task',
      body: ref(CreateTaskBody),
      response: { 201: ref(TaskResponse) }
    }
  }, async (request, reply) => {
    const task = await request.authenticatedBy(
      (token) => createTaskForToken(request.db, token, request.body),
      (userId) => createTask(request.db, userId, request.body),
      (key) => createTaskForKey(request.db, key, request.body))
    // The credential held (checked above), so its statement wrote the task: the same rules in SQL.
    if (task === undefined) throw new Error('the credential held, yet its statement wrote no task')
    reply.code(201)
    return { success: true as const, data: task }
  })

  fastify.get('/:id', {
    config: { scopes: READ },
    schema: {
      tags: ['tasks'],
      operationId: 'getTask',
      summary: 'One task',
      params: TaskIdParams,
      response: { 200: ref(TaskResponse), ...errorResponses(404) }
    }
  }, async (request) => {
    const task = await findTaskForUser(db, request.user.id, request.params.id)
    if (task === undefined) throw new TaskNotFoundError()
    return { success: true as const, data: task }
  })

  fastify.patch('/:id', {
    config: { scopes: WRITE },
    schema: {
      tags: ['tasks'],
      operationId: 'updateTask',
      summary: 'Change some fields of a task',
      description: '`completedAt` is set when the status becomes `completed` and cleared when it leaves it.',
      params: TaskIdParams,
      body: ref(UpdateTaskBody),
      response: { 200: ref(TaskResponse), ...errorResponses(404) }
    }
  }, async (request) => {
    const task = await updateTaskForUser(db, request.user.id, request.params.id, request.body)
    if (task === undefined) throw new TaskNotFoundError()
    return { success: true as const, data: task }
  })

  fastify.put('/:id', {
    config: { scopes: WRITE },
    schema: {
      tags: ['tasks'],
      operationId: 'replaceTask',
      summary: 'Replace a task',
      description: 'Full replacement: omitted optional fields become null, an omitted status becomes `todo`.',
      params: TaskIdParams,
      body: ref(CreateTaskBody),
      response: { 200: ref(TaskResponse), ...errorResponses(404) }
    }
  }, async (request) => {
    const task = await replaceTaskForUser(db, request.user.id, request.params.id, request.body)
    if (task === undefined) throw new TaskNotFoundError()
    return { success: true as const, data: task }
  })

  fastify.delete('/:id', {
    config: { scopes: WRITE },
    schema: {
      tags: ['tasks'],
      operationId: 'deleteTask',
      summary: 'Delete a task',
      params: TaskIdParams,
      response: { 200: Success(DeletedTask), ...errorResponses(404) }
    }
  }, async (request) => {
    const { id } = request.params
    if (!await deleteTaskForUser(db, request.user.id, id)) throw new TaskNotFoundError()
    return { success: true as const, data: { id, deleted: true as const } }
  })
}

export default tasks
