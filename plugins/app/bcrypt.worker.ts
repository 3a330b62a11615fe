// Runs in a piscina worker thread: bcrypt's ~0.5 s of CPU per hash stays off the event loop.
import bcrypt from 'bcryptjs'

export type BcryptTask = { op: 'hash', password: string, rounds: number } | { op: 'compare', password: string, hash: string }

export default function run (task: BcryptTask): Promise<string | boolean> {
  return task.op === 'hash' ? bcrypt.hash(task.password, task.rounds) : bcrypt.compare(task.password, task.hash)
}
