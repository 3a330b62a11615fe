// The caller's preferences. Only the user-editable fields can be written here; plan and
// payment fields are refused (400), they belong to billing.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { getOrCreatePreferences, toPreferences, updatePreferences } from '../../db/preferences.js'
import { errorResponses, Success } from '../../schemas/common.js'
import { Preferences, UpdatePreferencesBody } from '../../schemas/preferences.js'

const PreferencesResponse = Success(Preferences)

const preferences: FastifyPluginAsyncTypebox = async (fastify) => {
  const { db } = fastify

  fastify.get('', {
    schema: {
      tags: ['preferences'],
      operationId: 'getPreferences',
      summary: 'The caller\'s preferences (created with defaults on first read)',
      response: { 200: PreferencesResponse, ...errorResponses(401, 503) }
    }
  }, async (request) => ({ success: true as const, data: toPreferences(await getOrCreatePreferences(db, request.user.id)) }))

  const update = {
    schema: {
      tags: ['preferences'],
      summary: 'Change preferences',
      description: 'Accepts theme, language, defaultStatus, emailNotifications, taskReminders, weeklyDigest. ' +
        '`plan` and payment fields are refused with 400. PUT is the same partial update as PATCH (the spec documents them as one operation).',
      body: UpdatePreferencesBody,
      response: { 200: PreferencesResponse, ...errorResponses(400, 401, 413, 415, 503) }
    }
  }
  const handler = async (request: { user: { id: string }, body: UpdatePreferencesBody }) =>
    ({ success: true as const, data: toPreferences(await updatePreferences(db, request.user.id, request.body)) })

  fastify.patch('', { schema: { ...update.schema, operationId: 'updatePreferences' } }, handler)
  fastify.put('', { schema: { ...update.schema, operationId: 'replacePreferences' } }, handler)
}

export default preferences
