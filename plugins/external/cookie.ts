// Cookies: the auth token may arrive as the httpOnly cookie `auth_token`.
import cookie from '@fastify/cookie'

export default cookie
