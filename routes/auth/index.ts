// Sign-up, sign-in, the current user, sign-out.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { revokeToken } from '../../db/revoked-tokens.js'
import { createUserWithPreferences, findUserByEmail, isUniqueViolation, normalizeEmail, toUser } from '../../db/users.js'
import { errorResponses, NullSuccess, Success } from '../../schemas/common.js'
import { EmailTakenError, InvalidCredentialsError, RateLimitedError, ValidationError } from '../../schemas/errors.js'
import { AuthResponse, LoginBody, MAX_PASSWORD_BYTES, RegisterBody, User } from '../../schemas/users.js'
import { randomUUID } from 'node:crypto'

const tooLong = (password: string) => Buffer.byteLength(password, 'utf8') > MAX_PASSWORD_BYTES
const TOO_LONG_DETAIL = `Password must be at most ${MAX_PASSWORD_BYTES} bytes - password`

const auth: FastifyPluginAsyncTypebox = async (fastify) => {
  const { db, passwords, config } = fastify

  // Guessing passwords or flooding sign-ups: AUTH_RATE_LIMIT_MAX per window, per client
  // address and, separately, per email address (so many addresses cannot target one account).
  const limited = config.AUTH_RATE_LIMIT_MAX > 0
  const perAddress = limited ? { max: config.AUTH_RATE_LIMIT_MAX, timeWindow: config.RATE_LIMIT_WINDOW_MS } : undefined
  // createRateLimit, not rateLimit: the latter skips a request another limiter already counted.
  const emailLimit = limited
    ? fastify.createRateLimit({
      max: config.AUTH_RATE_LIMIT_MAX,
      timeWindow: config.RATE_LIMIT_WINDOW_MS,
      keyGenerator: (request) => `auth-email:${normalizeEmail((request.body as { email: string }).email)}`
    })
    : undefined
  const perEmail = emailLimit
    ? [async (request: FastifyRequest, reply: FastifyReply) => {
        const result = await emailLimit(request)
        if (!result.isAllowed && result.isExceeded) {
          reply.header('retry-after', String(result.ttlInSeconds))
          throw new RateLimitedError()
        }
      }]
    : []

  fastify.post('/register', {
    config: { public: true, ...(perAddress && { rateLimit: perAddress }) },
    preHandler: perEmail,
    schema: {
      tags: ['auth'],
      operationId: 'register',
      summary: 'Create an account and sign in',
      description: 'Emails are trimmed and lower-cased. The password is 8 characters to 72 bytes (UTF-8). Sets the `auth_token` cookie.',
      body: RegisterBody,
      response: { 201: AuthResponse, ...errorResponses(400, 409, 413, 415, 429, 503) }
    }
  }, async (request, reply) => {
    const { password } = request.body
    if (tooLong(password)) throw new ValidationError([TOO_LONG_DETAIL])
    passwords.admit()
    const email = normalizeEmail(request.body.email)
    // Cheap early answer; the unique key below is what settles a race.
    if (await findUserByEmail(db, email)) throw new EmailTakenError()
    const passwordHash = await passwords.hash(password)
    const name = request.body.name?.trim() || null
    let user
    try {
      user = await db.transaction().execute((tx) => createUserWithPreferences(tx, { id: randomUUID(), name, email, passwordHash }))
    } catch (err) {
      if (isUniqueViolation(err)) throw new EmailTakenError()
      throw err
    }
    const token = fastify.signIn(reply, user)
    return reply.code(201).send({ success: true, token, user: toUser(user) })
  })

  fastify.post('/login', {
    config: { public: true, validationCode: 'INVALID_INPUT', ...(perAddress && { rateLimit: perAddress }) },
    preHandler: perEmail,
    schema: {
      tags: ['auth'],
      operationId: 'login',
      summary: 'Sign in',
      description: 'Unknown email and wrong password get the same 401 after the same work. Sets the `auth_token` cookie.',
      body: LoginBody,
      response: { 200: AuthResponse, ...errorResponses(400, 401, 413, 415, 429, 503) }
    }
  }, async (request, reply) => {
    const { password } = request.body
    if (tooLong(password)) throw new ValidationError([TOO_LONG_DETAIL], 'INVALID_INPUT')
    passwords.admit()
    const user = await findUserByEmail(db, normalizeEmail(request.body.email))
    const matches = await passwords.verify(password, user?.password)
    if (!matches || user === undefined) throw new InvalidCredentialsError()
    const token = fastify.signIn(reply, user)
    return { success: true as const, token, user: toUser(user) }
  })

  fastify.get('/me', {
    schema: {
      tags: ['auth'],
      operationId: 'getCurrentUser',
      summary: 'The signed-in user',
      response: { 200: Success(User), ...errorResponses(401, 503) }
    }
  }, async (request) => ({ success: true as const, data: toUser(request.user) }))

  fastify.post('/logout', {
    schema: {
      tags: ['auth'],
      operationId: 'logout',
      summary: 'Sign out: revoke the presented token and clear the cookie',
      response: { 200: NullSuccess, ...errorResponses(401, 503) }
    }
  }, async (request, reply) => {
    const claims = request.tokenClaims!
    await revokeToken(db, { jti: claims.jti, userId: request.user.id, expiresAt: new Date(claims.exp * 1000) })
    fastify.clearAuthCookie(reply)
    return { success: true as const, data: null }
  })
}

export default auth
