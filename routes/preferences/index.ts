// The caller's preferences. Only the user-editable fields can be written here; plan and
// payment fields are refused (400), they belong to billing. Bodies may use the origin web
// client's vocabulary: either name of the default task status, "enabled"/"disabled" or
// booleans for the notification settings.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { readPreferences, readPreferencesForKey, readPreferencesForToken, toPreferences, updatePreferences, type PreferenceChanges } from '../../db/preferences.js'
import { ref } from '../../schemas/common.js'
import { ValidationError } from '../../errors.js'
import { PreferencesResponse, UpdatePreferencesBody } from '../../schemas/preferences.js'

const TIMEZONE_NAME = /^[A-Za-z][A-Za-z0-9_+-]*(\/[A-Za-z0-9_+-]+)*$/

/**
 * The zone's name if it is one of the IANA time zones this runtime knows, in its canonical
 * spelling when only the case differs; undefined otherwise (offsets such as +01:00 included).
 */
export function ianaTimeZone (name: string): string | undefined {
  if (!TIMEZONE_NAME.test(name)) return undefined
  try {
    const resolved = new Intl.DateTimeFormat('en-US', { timeZone: name }).resolvedOptions().timeZone
    return resolved.toLowerCase() === name.toLowerCase() ? resolved : name
  } catch {
    return undefined
  }
}

const enabled = (value: boolean | 'enabled' | 'disabled' | undefined): boolean | undefined =>
  value === undefined ? undefined : value === true || value === 'enabled'

function toChanges (body: UpdatePreferencesBody): PreferenceChanges {
  const details: string[] = []
  if (body.defaultStatus !== undefined && body.defaultTaskStatus !== undefined && body.defaultStatus !== body.defaultTaskStatus) {
    details.push('Must equal defaultStatus when both are sent - defaultTaskStatus')
  }
  let timezone = body.timezone
  if (typeof timezone === 'string') {
    timezone = ianaTimeZone(timezone)
    if (timezone === undefined) details.push('Must be an IANA time zone such as Europe/Paris - timezone')
  }
  if (details.length > 0) throw new ValidationError(details)
  return {
    theme: body.theme,
    language: body.language,
    timezone,
    defaultStatus: body.defaultStatus ?? body.defaultTaskStatus,
    emailNotifications: enabled(body.emailNotifications),
    taskReminders: enabled(body.taskReminders),
    weeklyDigest: enabled(body.weeklyDigest),
    pushNotifications: enabled(body.pushNotifications)
  }
}

const preferences: FastifyPluginAsyncTypebox = async (fastify) => {
  const { db } = fastify

  // What an API key needs here (a session holds every scope): docs/api-keys.md.
  fastify.get('', {
    // The statement checks the token too (one round trip).
    config: { scopes: ['preferences:read'], tokenInStatement: true, keyInStatement: true },
    schema: {
      tags: ['preferences'],
      operationId: 'getPreferences',
      summary: 'The caller\'s preferences (created with defaults on first read)',
      response: { 200: ref(PreferencesResponse) }
    }
  }, async (request) => ({
    success: true as const,
    data: await request.authenticatedBy(
      (token) => readPreferencesForToken(db, token),
      (userId) => readPreferences(db, userId),
      (key) => readPreferencesForKey(db, key))
  }))

  const update = {
    schema: {
      tags: ['preferences'],
      summary: 'Change preferences',
      description: 'Accepts theme, language, timezone, defaultStatus (or defaultTaskStatus), emailNotifications, taskReminders, ' +
        'weeklyDigest and pushNotifications (each `"enabled"`, `"disabled"`, `true` or `false`). ' +
        '`plan` and payment fields are refused with 400. PUT is the same partial update as PATCH (the spec documents them as one operation).',
      body: ref(UpdatePreferencesBody),
      response: { 200: ref(PreferencesResponse) }
    }
  }
  const handler = async (request: { user: { id: string }, body: UpdatePreferencesBody }) =>
    ({ success: true as const, data: toPreferences(await updatePreferences(db, request.user.id, toChanges(request.body))) })

  const config = { scopes: ['preferences:write'] }
  fastify.patch('', { config, schema: { ...update.schema, operationId: 'updatePreferences' } }, handler)
  fastify.put('', { config, schema: { ...update.schema, operationId: 'replacePreferences' } }, handler)
}

export default preferences
