// `npm run db:types`: the schema the migrations make, as kysely-codegen writes it (printed, to
// start a new table's interface from); then, as `npm run db:types:check` alone (CI), whether
// db/types.ts agrees with it. db/types.ts stays written by hand, narrower than the database
// says (docs/database.md: what codegen's output loses, measured); this check keeps it honest.
// Both run on a throwaway embedded database migrated from db/migrations: no server needed,
// and the same answer on every machine (codegen's output was measured identical on PostgreSQL).
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { PostgresDialect, PostgresIntrospector, serializeFromMetadata, type DatabaseMetadata } from 'kysely-codegen'
import ts from 'typescript'
import { createDatabase } from '../db/engine/connect.js'
import { migrateToLatest } from '../db/engine/migrate.js'

const TYPES_FILE = fileURLToPath(new URL('../db/types.ts', import.meta.url))

/** Columns the database keeps and db/types.ts leaves out on purpose, with why. */
const UNTYPED_COLUMNS: Record<string, string> = {
  'users.token_version': 'left in place, unused, for instances of the previous version (migration 2026-11-23T00-00-00_origin-client)'
}

// What the drivers return for each PostgreSQL type, as measured on both (db/engine/timestamps.ts:
// timestamptz as ISO strings). int8: a string from pg, a number from PGlite, so either is taken.
const TYPES_OF: Record<Kind, string[]> = {
  string: ['text', 'varchar', 'bpchar', 'uuid', 'timestamptz', 'numeric'],
  number: ['int2', 'int4', 'float4', 'float8'],
  int8: ['int8'],
  boolean: ['bool'],
  Date: ['date', 'timestamp'],
  json: ['json', 'jsonb']
}
type Kind = 'string' | 'number' | 'int8' | 'boolean' | 'Date' | 'json'
const KIND_OF = new Map(Object.entries(TYPES_OF).flatMap(([kind, types]) => types.map((type) => [type, kind as Kind])))

async function introspect (): Promise<DatabaseMetadata> {
  const dataDir = await mkdtemp(join(tmpdir(), 'db-types-'))
  const handle = createDatabase({ dataDir })
  try {
    await migrateToLatest(handle.db)
    return await new PostgresIntrospector().introspect({ db: handle.db })
  } finally {
    await handle.close()
    await rm(dataDir, { recursive: true, force: true })
  }
}

/** One column of db/types.ts, as Kysely reads it: its select type and insert type. */
interface TypedColumn { select: ts.Type, insert: ts.Type }

/** The tables of db/types.ts' Database interface and their columns, through the TypeScript checker. */
function typedTables (): { checker: ts.TypeChecker, tables: Map<string, Map<string, TypedColumn>> } {
  const program = ts.createProgram([TYPES_FILE], { strict: true, module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, skipLibCheck: true, noEmit: true })
  const checker = program.getTypeChecker()
  const moduleSymbol = checker.getSymbolAtLocation(program.getSourceFile(TYPES_FILE)!)!
  const database = checker.getExportsOfModule(moduleSymbol).find((symbol) => symbol.name === 'Database')
  if (database === undefined) throw new Error('db/types.ts exports no Database interface')
  const tables = new Map<string, Map<string, TypedColumn>>()
  for (const table of checker.getPropertiesOfType(checker.getDeclaredTypeOfSymbol(database))) {
    const columns = new Map<string, TypedColumn>()
    for (const column of checker.getPropertiesOfType(checker.getTypeOfSymbol(table))) {
      const type = checker.getTypeOfSymbol(column)
      // Kysely's ColumnType<S, I, U> carries its parts as __select__ and __insert__; a plain type is all three.
      const part = (name: string) => { const p = type.getProperty(name); return p === undefined ? type : checker.getTypeOfSymbol(p) }
      columns.set(column.name, { select: part('__select__'), insert: part('__insert__') })
    }
    tables.set(table.name, columns)
  }
  return { checker, tables }
}

const members = (type: ts.Type): ts.Type[] => type.isUnion() ? type.types : [type]
const has = (type: ts.Type, flags: ts.TypeFlags) => members(type).some((t) => (t.flags & flags) !== 0)
const isNever = (type: ts.Type) => (type.flags & ts.TypeFlags.Never) !== 0

/** Where db/types.ts and the migrated schema disagree, one line each. */
function compare (metadata: DatabaseMetadata): string[] {
  const { checker, tables } = typedTables()
  const problems: string[] = []
  const show = (type: ts.Type) => checker.typeToString(type)
  for (const table of metadata.tables) {
    const typed = tables.get(table.name)
    if (typed === undefined) {
      problems.push(`${table.name}: a table of the database, missing from Database in db/types.ts`)
      continue
    }
    for (const column of table.columns) {
      const name = `${table.name}.${column.name}`
      const described = `${column.dataType}${column.isNullable ? ', null' : ', not null'}${column.hasDefaultValue ? ', default' : ''}`
      const typedColumn = typed.get(column.name)
      if (typedColumn === undefined) {
        if (!(name in UNTYPED_COLUMNS)) problems.push(`${name}: a column of the database (${described}), missing from db/types.ts`)
        continue
      }
      typed.delete(column.name)
      // never: the column is not read through this type (db/types.ts says why), so nothing to compare.
      const { select, insert } = typedColumn
      if (!isNever(select)) {
        if (has(select, ts.TypeFlags.Null) !== column.isNullable) problems.push(`${name}: ${column.isNullable ? 'nullable' : 'not null'} in the database (${described}), read as ${show(select)}`)
        problems.push(...kindProblems(name, column.dataType, column.enumValues, select, show))
      }
      const required = !column.isNullable && !column.hasDefaultValue && !column.isAutoIncrementing
      if (required && (isNever(insert) || has(insert, ts.TypeFlags.Undefined))) {
        problems.push(`${name}: required on insert (${described}), but db/types.ts lets an insert leave it out (${show(insert)})`)
      }
    }
    for (const column of typed.keys()) problems.push(`${table.name}.${column}: in db/types.ts, not a column of the database`)
    tables.delete(table.name)
  }
  for (const table of tables.keys()) problems.push(`${table}: in Database of db/types.ts, not a table of the database`)
  return problems
}

function kindProblems (name: string, dataType: string, enumValues: string[] | null, select: ts.Type, show: (type: ts.Type) => string): string[] {
  const values = members(select).filter((t) => (t.flags & ts.TypeFlags.Null) === 0)
  if (enumValues !== null) {
    const literals = values.map((t) => t.isStringLiteral() ? t.value : undefined)
    if (literals.includes(undefined) || literals.length !== enumValues.length || !enumValues.every((v) => literals.includes(v))) {
      return [`${name}: the enum ${dataType} is ${enumValues.map((v) => `'${v}'`).join(' | ')}, read as ${show(select)}`]
    }
    return []
  }
  const kind = KIND_OF.get(dataType)
  if (kind === undefined) return [`${name}: ${dataType} is a type this check does not know: add it to TYPES_OF in scripts/db-types.ts`]
  if (kind === 'json') return []
  const isKind: Record<Exclude<Kind, 'json'>, (t: ts.Type) => boolean> = {
    string: (t) => (t.flags & ts.TypeFlags.StringLike) !== 0,
    number: (t) => (t.flags & ts.TypeFlags.NumberLike) !== 0,
    int8: (t) => (t.flags & (ts.TypeFlags.StringLike | ts.TypeFlags.NumberLike)) !== 0,
    boolean: (t) => (t.flags & ts.TypeFlags.BooleanLike) !== 0,
    Date: (t) => t.getSymbol()?.name === 'Date'
  }
  return values.every(isKind[kind]) ? [] : [`${name}: ${dataType} is read as ${kind === 'int8' ? 'a string (pg) or a number (PGlite)' : kind === 'Date' ? 'a Date' : `a ${kind}`}, typed ${show(select)}`]
}

const metadata = await introspect()
if (!process.argv.includes('--check')) {
  // timestamptz as the drivers return it here (db/engine/timestamps.ts), not codegen's Date.
  process.stdout.write(serializeFromMetadata({ metadata, dialect: new PostgresDialect(), typeMapping: { timestamptz: 'string' } }))
}
const problems = compare(metadata)
if (problems.length > 0) {
  console.error(`db/types.ts disagrees with the migrated schema (${problems.length}):\n${problems.map((p) => `  ${p}`).join('\n')}`)
  process.exitCode = 1
} else {
  console.error(`db/types.ts agrees with the migrated schema: ${metadata.tables.length} tables, ${metadata.tables.reduce((n, t) => n + t.columns.length, 0)} columns`)
}
