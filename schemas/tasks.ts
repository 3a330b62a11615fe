// Task JSON and the task request schemas.
import { Type, type Static } from 'typebox'
import { Nullable, NullableTimestamp, Timestamp } from './common.js'

export const TaskStatus = Type.Enum(['todo', 'in-progress', 'completed'], { type: 'string' })

export const Task = Type.Object({
  id: Type.Integer(),
  title: Type.String(),
  description: Nullable(Type.String()),
  status: TaskStatus,
  dueDate: NullableTimestamp,
  completedAt: NullableTimestamp,
  createdAt: Timestamp,
  updatedAt: Timestamp
})
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
const DueDate = Nullable(Type.String({ format: 'date-time', errorMessage: 'Must be an ISO-8601 date-time' }))

export const CreateTaskBody = Type.Object({
  title: Title,
  description: Type.Optional(Description),
  status: Type.Optional(TaskStatus),
  dueDate: Type.Optional(DueDate)
}, { additionalProperties: false, examples: [{ title: 'Write the quarterly report', status: 'todo', dueDate: '2026-12-01T09:00:00Z' }] })
export type CreateTaskBody = Static<typeof CreateTaskBody>

export const UpdateTaskBody = Type.Object({
  title: Type.Optional(Title),
  description: Type.Optional(Description),
  status: Type.Optional(TaskStatus),
  dueDate: Type.Optional(DueDate)
}, { additionalProperties: false, minProperties: 1, examples: [{ status: 'completed' }] })
export type UpdateTaskBody = Static<typeof UpdateTaskBody>

export const ListTasksQuery = Type.Object({
  status: Type.Optional(TaskStatus),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 50, description: 'Page size' })),
  offset: Type.Optional(Type.Integer({ minimum: 0, maximum: 2147483647, default: 0, description: 'Tasks to skip' }))
}, { additionalProperties: false })
export type ListTasksQuery = Static<typeof ListTasksQuery>
