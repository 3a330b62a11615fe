// How a secret token is kept at rest: only its SHA-256, so a copy of the database holds no
// usable link, state or code. Shared by mail/ (link tokens) and accounts/ (provider sign-in's
// state, browser binding and codes; the token a link brings back).
import { createHash } from 'node:crypto'

/** The SHA-256 of a token (hex): what is stored and looked up in its place. */
export const hashToken = (token: string): string => createHash('sha256').update(token, 'utf8').digest('hex')
