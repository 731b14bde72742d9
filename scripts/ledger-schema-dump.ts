import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';

/**
 * The ledger's schema as one text, from PostgreSQL's catalog: tables with their columns and
 * constraints, indexes, sequences, views, functions and triggers, each kind sorted by name. What a
 * freshly migrated database holds is committed as schema.sql, and a test compares the two, so a
 * migration or function source whose effect differs from what was reviewed cannot pass unnoticed.
 * (pg_dump would do, but only in the server's major version, which a machine need not have.)
 * A development tool, not product code: it starts a PostgreSQL of its own (`npm run ledger:schema`).
 */
export const committedSchemaPath = fileURLToPath(new URL('../src/ledger/schema.sql', import.meta.url));

export const regenerateSchemaHint = 'run `npm run ledger:schema` and commit src/ledger/schema.sql';

// node-pg-migrate's bookkeeping, not the ledger's.
const excludedRelations = ['ledger_migrations', 'ledger_migrations_id_seq'];

type Queryable = Pick<pg.ClientBase, 'query'>;

/** `$1` in `sql` is the list of excluded relation names. */
async function rows<T extends pg.QueryResultRow>(db: Queryable, sql: string, params: unknown[] = [excludedRelations]): Promise<T[]> {
  return (await db.query<T>(sql, params)).rows;
}

export async function dumpLedgerSchema(db: Queryable): Promise<string> {
  const out: string[] = [
    '-- The ledger schema after every migration, as PostgreSQL reports it. Generated: do not edit;',
    `-- ${regenerateSchemaHint}.`,
    '',
  ];

  const columns = await rows<{ table: string; line: string }>(
    db,
    `SELECT c.relname AS table,
            quote_ident(a.attname) || ' ' || format_type(a.atttypid, a.atttypmod)
              || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
              || coalesce(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), '') AS line
       FROM pg_class c
       JOIN pg_namespace n ON n.oid = c.relnamespace
       JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
       LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
      WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND c.relname <> ALL ($1::text[])
      ORDER BY c.relname, a.attnum`,
  );
  // NOT NULL constraints are on their columns already, constraint triggers among the triggers.
  const constraints = await rows<{ table: string; line: string }>(
    db,
    `SELECT c.relname AS table, 'CONSTRAINT ' || quote_ident(k.conname) || ' ' || pg_get_constraintdef(k.oid, true) AS line
       FROM pg_constraint k
       JOIN pg_class c ON c.oid = k.conrelid
       JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = 'public' AND k.contype NOT IN ('n', 't') AND c.relname <> ALL ($1::text[])
      ORDER BY c.relname, k.conname`,
  );
  // Storage that changes what the ledger costs or keeps: an unlogged table, a fill factor.
  const storage = await rows<{ table: string; unlogged: boolean; options: string | null }>(
    db,
    `SELECT c.relname AS table, c.relpersistence = 'u' AS unlogged, array_to_string(c.reloptions, ', ') AS options
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND c.relname <> ALL ($1::text[])`,
  );
  const tables = [...new Set(columns.map((column) => column.table))];
  for (const table of tables) {
    const lines = [
      ...columns.filter((column) => column.table === table).map((column) => column.line),
      ...constraints.filter((constraint) => constraint.table === table).map((constraint) => constraint.line),
    ];
    const kept = storage.find((candidate) => candidate.table === table);
    const storageClause = kept?.options ? ` WITH (${kept.options})` : '';
    out.push(`CREATE ${kept?.unlogged ? 'UNLOGGED ' : ''}TABLE ${table} (\n  ${lines.join(',\n  ')}\n)${storageClause};`, '');
  }

  // Indexes that back a constraint are that constraint's, above.
  const indexes = await rows<{ def: string }>(
    db,
    `SELECT pg_get_indexdef(i.indexrelid) AS def
       FROM pg_index i
       JOIN pg_class x ON x.oid = i.indexrelid
       JOIN pg_class c ON c.oid = i.indrelid
       JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = 'public' AND c.relname <> ALL ($1::text[])
        AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)
      ORDER BY x.relname`,
  );
  for (const index of indexes) out.push(`${index.def};`);
  if (indexes.length > 0) out.push('');

  const sequences = await rows<{ line: string }>(
    db,
    `SELECT 'CREATE SEQUENCE ' || quote_ident(s.sequencename) || ' AS ' || s.data_type
              || ' START ' || s.start_value || ' INCREMENT ' || s.increment_by
              || coalesce(' OWNED BY ' || d.refobjid::regclass || '.' || quote_ident(a.attname), '') || ';' AS line
       FROM pg_sequences s
       JOIN pg_class q ON q.relname = s.sequencename
       JOIN pg_namespace n ON n.oid = q.relnamespace AND n.nspname = s.schemaname
       LEFT JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = q.oid AND d.deptype IN ('a', 'i')
                            AND d.refclassid = 'pg_class'::regclass
       LEFT JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
      WHERE s.schemaname = 'public' AND s.sequencename <> ALL ($1::text[])
      ORDER BY s.sequencename`,
  );
  for (const sequence of sequences) out.push(sequence.line);
  if (sequences.length > 0) out.push('');

  const views = await rows<{ name: string; kind: string; def: string }>(
    db,
    `SELECT c.relname AS name, c.relkind::text AS kind, pg_get_viewdef(c.oid, true) AS def
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = 'public' AND c.relkind IN ('v', 'm') AND c.relname <> ALL ($1::text[])
      ORDER BY c.relname`,
  );
  for (const view of views) {
    out.push(`CREATE ${view.kind === 'm' ? 'MATERIALIZED VIEW' : 'VIEW'} ${view.name} AS\n${view.def.trimEnd()}`, '');
  }

  // Functions that extensions own are the extension's; none is expected, but none is dumped either.
  const functions = await rows<{ def: string }>(
    db,
    `SELECT pg_get_functiondef(p.oid) AS def
       FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
      WHERE n.nspname = 'public' AND p.prokind IN ('f', 'p')
        AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')
      ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)`,
    [],
  );
  for (const fn of functions) out.push(`${fn.def.trimEnd()};`, '');

  const triggers = await rows<{ def: string }>(
    db,
    `SELECT pg_get_triggerdef(t.oid, true) AS def
       FROM pg_trigger t
       JOIN pg_class c ON c.oid = t.tgrelid
       JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = 'public' AND NOT t.tgisinternal AND c.relname <> ALL ($1::text[])
      ORDER BY c.relname, t.tgname`,
  );
  for (const trigger of triggers) out.push(`${trigger.def};`);

  return `${out.join('\n').trimEnd()}\n`;
}

/**
 * Where the committed dump and a fresh one first differ, with a few lines of each around it: enough
 * to see what changed without a diff tool. Null when they are the same.
 */
export function describeSchemaDifference(committed: string, fresh: string, context = 3): string | null {
  if (committed === fresh) return null;
  const a = committed.split('\n');
  const b = fresh.split('\n');
  let first = 0;
  while (first < a.length && first < b.length && a[first] === b[first]) first++;
  const from = Math.max(0, first - context);
  const show = (lines: string[]): string =>
    lines
      .slice(from, first + context + 1)
      .map((line, i) => `${String(from + i + 1).padStart(5)}  ${line}`)
      .join('\n');
  return [
    `src/ledger/schema.sql differs from a freshly migrated database, first at line ${first + 1}.`,
    `If the change is intended, ${regenerateSchemaHint}; \`git diff src/ledger/schema.sql\` then shows all of it.`,
    '--- committed',
    show(a),
    '+++ fresh migrate',
    show(b),
  ].join('\n');
}

/** Migrates a fresh embedded PostgreSQL and writes its dump to schema.sql. */
async function writeCommittedSchema(): Promise<void> {
  // Imported here: the dump itself needs no server of its own.
  const [{ startLedgerPostgres }, { migrateLedger }, { default: pg }] = await Promise.all([
    import('../src/runtime/local-stack.js'),
    import('../src/ledger/migrate.js'),
    import('pg'),
  ]);
  const dir = await mkdtemp(join(tmpdir(), 'ledger-schema-'));
  try {
    // PostgreSQL refuses to run as root; the OS user it runs as must be able to enter this folder.
    await chmod(dir, 0o711);
    const server = await startLedgerPostgres({ dataDir: join(dir, 'pg'), logFilePath: join(dir, 'pg.log') });
    try {
      await migrateLedger(server.databaseUrl);
      const client = new pg.Client({ connectionString: server.databaseUrl });
      await client.connect();
      try {
        await writeFile(committedSchemaPath, await dumpLedgerSchema(client));
      } finally {
        await client.end();
      }
    } finally {
      await server.stop();
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  process.stderr.write(`wrote ${committedSchemaPath}\n`);
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await writeCommittedSchema();
}
