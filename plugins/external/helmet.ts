// Security headers suited to a JSON API: nothing may be loaded, framed or sniffed.
import helmet, { type FastifyHelmetOptions } from '@fastify/helmet'

export const autoConfig: FastifyHelmetOptions = {
  contentSecurityPolicy: { useDefaults: false, directives: { defaultSrc: ["'none'"], frameAncestors: ["'none'"] } },
  crossOriginResourcePolicy: { policy: 'same-site' },
  referrerPolicy: { policy: 'no-referrer' }
}

export default helmet
