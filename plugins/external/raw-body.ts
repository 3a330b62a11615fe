// The webhook's exact bytes for the signature check: opt-in per route (config.rawBody),
// kept as a Buffer (a utf8 string would corrupt non-UTF-8 bytes and break signatures).
import rawBody from 'fastify-raw-body'

export const autoConfig = { field: 'rawBody', global: false, encoding: false, runFirst: true }

export default rawBody
