// Where the project the benchmark measures lives, and the benchmark's own files.
import path from 'node:path'
import { fileURLToPath } from 'node:url'

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
export const BENCH_DIR = path.join(ROOT, 'bench')
