// Whoever finds a personal API key where it should not be (public code, a paste, a log)
// can end it without knowing whose it is (docs/api-keys.md, "When a key leaks"): GitHub's
// secret scanning and the like report keys they recognise by their form here. The answer is
// always the same, so it tells nothing about the keys.
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { clientOf } from '../../client-address.js'
import { ReportedKeysBody } from '../../schemas/api-keys.js'
import { NullSuccess, ref } from '../../schemas/common.js'

const reportedKeys: FastifyPluginAsyncTypebox = async (fastify) => {
  fastify.post('/revoke', {
    config: { public: true },
    schema: {
      tags: ['auth'],
      operationId: 'revokeLeakedApiKeys',
      summary: 'Revoke API keys found exposed: no credential needed',
      description: 'Up to 100 keys. Always 200 `{success:true}` whatever they were (live, dead, someone else\'s, not keys at all), so it reveals ' +
        'nothing. Each live key among them stops working at once; its owner is mailed and an `api-key-reported` event recorded. A string ' +
        'that fails the key\'s checksum costs no query. Limited per client address like the requests that send mail (429 `RATE_LIMITED`).',
      body: ref(ReportedKeysBody),
      response: { 200: NullSuccess }
    }
  }, async (request) => {
    await fastify.apiKeys.revokeReported(clientOf(request), request.body.keys)
    return { success: true as const, data: null }
  })
}

export default reportedKeys
