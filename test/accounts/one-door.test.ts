// One door (accounts/sign-in.ts): every way in ends in the door's `complete`, and nothing else
// can mint a session token. Read from the sources (a route that signed or set the auth cookie
// itself would be a way around a second factor) and from the OpenAPI document (every operation
// that answers a token is one of the door's callers). Also the credential readers' order.
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { join, relative } from 'node:path'
import t from 'tap'
import { holdsScopes, readCredential, type CredentialReader, type Principal } from '../../accounts/credentials.js'
import type { UserRow } from '../../db/types.js'
import { json, sharedApp } from '../support/helper.js'
import { PROJECT_ROOT } from '../support/paths.js'

/** The route files that call the door (`complete`, or `completeSecondFactor`), and how many ways in each has. */
const DOOR_CALLS: Record<string, number> = {
  'routes/auth/index.ts': 2, // register, login
  'routes/auth/recovery.ts': 1, // resetPassword
  'routes/auth/providers.ts': 1, // exchangeSignInCode
  'routes/auth/mfa.ts': 1, // completeSecondFactor: the second step of the three above
  'routes/auth/passkey.ts': 1, // signInWithPasskey: a passkey with user verification, both factors
  'routes/account/index.ts': 1 // updateProfile and replaceProfile: one handler renews the session after a password change
}
/** The operations that answer a token: the door's callers. */
const TOKEN_ANSWERS = ['completeSecondFactor', 'exchangeSignInCode', 'login', 'register', 'replaceProfile', 'resetPassword', 'signInWithPasskey', 'updateProfile']

/** The service's own TypeScript: everything but tests, tools, the bench, the examples and what is built or installed. */
function serviceSources (dir = PROJECT_ROOT): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name)
    if (/^(node_modules|dist|test|bench|examples|scripts|\..*)$/.test(name)) return []
    if (statSync(path).isDirectory()) return serviceSources(path)
    return /\.ts$/.test(name) ? [relative(PROJECT_ROOT, path)] : []
  })
}
const sources = new Map(serviceSources().map((file) => [file, readFileSync(join(PROJECT_ROOT, file), 'utf8')]))
const filesMatching = (pattern: RegExp) => [...sources].filter(([, text]) => pattern.test(text)).map(([file]) => file).sort()
const count = (text: string, pattern: RegExp) => text.match(new RegExp(pattern, 'g'))?.length ?? 0

t.test('a token is signed in one place, for the door', async (t) => {
  t.ok(sources.size > 50, `${sources.size} source files read`)
  t.same(filesMatching(/\bjwt\.sign\b|\.sign\s*\(\s*\{\s*sub\b/), ['plugins/app/sign-in.ts'], 'the signer is handed to the door and to nothing else')
  t.same(filesMatching(/(?<!function )\bsignInDoor\s*\(/), ['plugins/app/sign-in.ts'], 'one door is built')
  t.same(filesMatching(/\bsessions\.start\s*\(/), ['accounts/sign-in.ts'], 'only the door starts a session')
  t.same(filesMatching(/setCookie\(\s*AUTH_COOKIE/), ['plugins/app/authenticate.ts'], 'the auth cookie is set by the answer decorator alone')
  t.same(filesMatching(/createSigner|createHmac\([^)]*(jwt|Secret)/i), [], 'no token signed by hand')
})

t.test('the routes that call the door are the ways in, and only they answer a token', async (t) => {
  const routeFiles = [...sources.keys()].filter((file) => file.startsWith('routes/'))
  for (const file of routeFiles) {
    const text = sources.get(file)!
    t.equal(count(text, /signIn\.complete(SecondFactor)?\(/), DOOR_CALLS[file] ?? 0, `${file} calls the door ${DOOR_CALLS[file] ?? 0} times`)
    t.equal(count(text, /answerSignIn\(/), DOOR_CALLS[file] ?? 0, `${file} answers what the door returned, and nothing else`)
  }
  const app = await sharedApp()
  const doc = json(await app.inject({ method: 'GET', url: '/openapi.json' }))
  const resolve = (value: any): any => typeof value?.$ref === 'string' ? resolve(doc.components[value.$ref.split('/')[2]][value.$ref.split('/')[3]]) : value
  const answersToken: string[] = []
  for (const operations of Object.values(doc.paths as Record<string, Record<string, any>>)) {
    for (const op of Object.values(operations)) {
      const success = Object.entries(op.responses as Record<string, any>).filter(([status]) => /^2/.test(status))
      // A schema, or any branch of a union (a sign-in answers a token or the second factor's challenge).
      const carriesToken = (schema: any): boolean => 'token' in (schema?.properties ?? {}) || (schema?.anyOf ?? []).some((branch: any) => carriesToken(resolve(branch)))
      if (success.some(([, response]) => carriesToken(resolve(resolve(response).content?.['application/json']?.schema)))) answersToken.push(op.operationId)
    }
  }
  t.same(answersToken.sort(), TOKEN_ANSWERS, 'every operation whose answer carries a token is a door caller')
})

t.test('credentials: the first reader that takes one reads it; scopes are held by the principal', async (t) => {
  const user = { id: 'u' } as UserRow
  const principal = (scopes: Principal['scopes']): Principal => ({ user, session: null, scopes })
  const reader = (prefix: string, scopes: Principal['scopes']): CredentialReader => ({ takes: (c) => c.startsWith(prefix), read: async () => principal(scopes) })
  const readers = [reader('key_', new Set(['tasks:read'])), reader('', 'all')]
  const client = () => ({ address: '10.0.0.1', deviceCookie: undefined, userAgent: undefined })
  t.same((await readCredential(readers, 'key_abc', client)).scopes, new Set(['tasks:read']), 'the API key\'s reader, by its prefix')
  t.equal((await readCredential(readers, 'eyJ.x.y', client)).scopes, 'all', 'anything else: the session token\'s')
  await t.rejects(readCredential([reader('key_', 'all')], 'eyJ.x.y', client), { code: 'UNAUTHORIZED' }, 'no reader takes it: 401')
  t.ok(holdsScopes(principal('all'), ['tasks:write']))
  t.ok(holdsScopes(principal(new Set(['tasks:read', 'tasks:write'])), ['tasks:write']))
  t.notOk(holdsScopes(principal(new Set(['tasks:read'])), ['tasks:read', 'tasks:write']))
})
