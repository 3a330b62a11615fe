// Task JSON and the task request schemas.
import { Type, type Static } from 'typebox'
import { Nullable, NullableTimestamp, ref, Success, Timestamp } from './common.js'

export const TaskStatus = Type.Enum(['todo', 'in-progress', 'completed'], { $id: 'TaskStatus', type: 'string' })
export type TaskStatus = Static<typeof TaskStatus>

export const Task = Type.Object({
  id: Type.Integer(),
  title: Type.String(),
  description: Nullable(Type.String()),
  status: ref(TaskStatus),
  dueDate: NullableTimestamp,
  completedAt: NullableTimestamp,
  createdAt: Timestamp,
  updatedAt: Timestamp
}, { $id: 'Task' })
export type Task = Static<typeof Task>

export const TaskIdParams = Type.Object({
  id: Type.Integer({ minimum: 1, maximum: 2147483647, description: 'Task id' })
})

const Title = Type.String({
  minLength: 1,
  maxLength: 255,
  pattern: '\\S',
  errorMessage: { required: 'Title is required', minLength: 'Title is required', pattern: 'Title is required' },
  examples: ['Write the quarterly report']
})
const Description = Nullable(Type.String({ maxLength: 10_000 }))
const DueDate = Nullable(Type.String({ maxLength: 40, format: 'date-time', errorMessage: 'Must be an ISO-8601 date-time' }))
// The origin web client sends `completedAt: null`; the server sets it (when the status
// becomes completed) and clears it, so only null is accepted.
const CompletedAt = Type.Null({
  description: 'Set by the server when the status becomes `completed`; accepted as null only',
  errorMessage: 'Is set by the server when the status becomes completed; send null or leave it out'
})

export const CreateTaskBody = Type.Object({
  title: Title,
  description: Type.Optional(Description),
  status: Type.Optional(ref(TaskStatus)),
  dueDate: Type.Optional(DueDate),
  completedAt: Type.Optional(CompletedAt)
}, { $id: 'CreateTaskBody', additionalProperties: false, examples: [{ title: 'Write the quarterly report', status: 'todo', dueDate: '2026-12-01T09:00:00Z' }] })
export type CreateTaskBody = Static<typeof CreateTaskBody>

export const UpdateTaskBody = Type.Object({
  title: Type.Optional(Title),
  description: Type.Optional(Description),
  status: Type.Optional(ref(TaskStatus)),
  dueDate: Type.Optional(DueDate),
  completedAt: Type.Optional(CompletedAt)
}, { $id: 'UpdateTaskBody', additionalProperties: false, minProperties: 1, examples: [{ status: 'completed' }] })
export type UpdateTaskBody = Static<typeof UpdateTaskBody>

const MAX_PAGE = 1000

// The API reference's "Test Request" fills an optional parameter with an example, else its
// enum's first value, and sends it: GET /tasks went out as ?status=todo and the list looked
// empty. An example marked x-disabled (Scalar's extension) leaves the filter off until ticked.
// TaskStatus's values inline: the document generator drops whatever stands beside a $ref.
const StatusFilter = Type.Unsafe<TaskStatus>({
  type: 'string',
  enum: TaskStatus.enum,
  'x-examples': { 'any-status': { summary: 'Off: tasks of every status', value: 'todo', 'x-disabled': true } }
})

export const ListTasksQuery = Type.Object({
  status: Type.Optional(StatusFilter),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_PAGE, default: MAX_PAGE, description: 'Page size (a normal user\'s every task by default)' })),
  offset: Type.Optional(Type.Integer({ minimum: 0, maximum: 2147483647, default: 0, description: 'Tasks to skip' }))
}, { additionalProperties: false })
export type ListTasksQuery = Static<typeof ListTasksQuery>

const Count = (description: string) => Type.Integer({ minimum: 0, description })

export const TaskResponse = Success(ref(Task), { $id: 'TaskResponse' })

export const TaskList = Type.Object({
  success: Type.Literal(true),
  data: Type.Array(ref(Task)),
  total: Count('Tasks matching the filter, ignoring limit and offset (also the `X-Total-Count` header)'),
  todo: Count('All of the caller\'s tasks in `todo`, whatever the filter'),
  inProgress: Count('All of the caller\'s tasks in `in-progress`, whatever the filter'),
  completed: Count('All of the caller\'s tasks in `completed`, whatever the filter'),
  nextOffset: Type.Optional(Type.Integer({
    minimum: 1,
    description: 'Present only when more tasks match than this page holds: the `offset` of the next page (also in the ' +
      '`Link` header, `rel="next"`). A page ends at `limit` tasks, or earlier when its tasks\' JSON would pass about 512 KiB.'
  }))
}, { $id: 'TaskList' })

export const DeletedTask = Type.Object({ id: Type.Integer(), deleted: Type.Literal(true) })
