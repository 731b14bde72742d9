import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { PG_MIGRATE_LOCK_ID, runner } from 'node-pg-migrate';
import pg from 'pg';
import { applyLedgerFunctions } from './repeatable.js';

const migrationsDir = fileURLToPath(new URL('./migrations', import.meta.url));

/** How long one migration waits for another process's migration to finish before it fails (and may be retried). */
export const defaultMigrationLockWaitMs = 60_000;

/** Bound on connecting to run the migration; a database that is down fails fast and is retried by the caller. */
const connectTimeoutMs = 5_000;

/**
 * Brings the schema up to date, exactly once however many processes start at the same moment
 * (workers, API replicas, test files). node-pg-migrate's own lock is a try-lock that fails with
 * "Another migration is already running"; this one waits its turn instead (pg_advisory_lock,
 * bounded by `lockWaitMs`), then finds the schema already up to date. The versioned migrations run
 * first, then the ledger functions are re-created from their source files (repeatable.ts). The lock id is
 * node-pg-migrate's, so an older process that locks the library's way still excludes this one.
 *
 * Run as the schema's owner (MIGRATION_DATABASE_URL). A role that may not create objects in the
 * schema (the app role, when no migration URL is configured) does not migrate: it checks, under the
 * same lock, that every versioned migration has been applied, and fails naming the missing ones.
 */
export async function migrateLedger(
  databaseUrl: string,
  log: (line: string) => void = () => {},
  options: { lockWaitMs?: number } = {},
): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl, connectionTimeoutMillis: connectTimeoutMs, application_name: 'chargeguard-migrate' });
  // A connection that dies mid-migration reports through the awaited query; the event must not crash the process.
  client.on('error', (error) => log(`migration connection failed: ${error.message}`));
  await client.connect();
  try {
    await client.query(`SET lock_timeout = ${Math.max(1, Math.round(options.lockWaitMs ?? defaultMigrationLockWaitMs))}`);
    await client.query('SELECT pg_advisory_lock($1)', [PG_MIGRATE_LOCK_ID]);
    await client.query('SET lock_timeout = 0');
    try {
      if (!(await mayChangeSchema(client))) {
        await assertSchemaUpToDate(client);
        log('this role cannot change the schema; every migration is already applied');
        return;
      }
      await runner({
        dbClient: client,
        noLock: true,
        dir: migrationsDir,
        direction: 'up',
        migrationsTable,
        count: Infinity,
        checkOrder: true,
        log,
        logger: { debug: () => {}, info: log, warn: log, error: log },
      });
      await applyLedgerFunctions(client, log);
    } finally {
      await client
        .query('SELECT pg_advisory_unlock($1)', [PG_MIGRATE_LOCK_ID])
        .catch((error: unknown) => log(`releasing the migration lock failed (${(error as Error).message}); it ends with the session`));
    }
  } finally {
    await client.end().catch((error: unknown) => log(`closing the migration connection failed: ${(error as Error).message}`));
  }
}

const migrationsTable = 'ledger_migrations';

/**
 * Creating objects is not enough: migrating re-creates the ledger functions, which only their owner
 * may. So a role migrates when it may create in the schema and acts as the owner of what the
 * migrations made before (a member of that role, or a superuser); on PostgreSQL before 15, where
 * every role may create in `public`, an app role that the operator forgot to restrict only checks.
 */
async function mayChangeSchema(client: pg.Client): Promise<boolean> {
  const { rows } = await client.query<{ may: boolean }>(
    `SELECT has_schema_privilege(current_user, 'public', 'CREATE')
        AND coalesce((SELECT pg_has_role(current_user, c.relowner, 'USAGE') FROM pg_class c WHERE c.oid = to_regclass($1)), true) AS may`,
    [migrationsTable],
  );
  return rows[0]!.may;
}

/** The versioned migrations this build ships, by the name node-pg-migrate records (file name without .sql). */
export function shippedMigrationNames(): string[] {
  return readdirSync(migrationsDir)
    .filter((file) => file.endsWith('.sql'))
    .map((file) => file.slice(0, -'.sql'.length))
    .sort();
}

async function assertSchemaUpToDate(client: pg.Client): Promise<void> {
  const { rows: whoRows } = await client.query<{ role: string; table: string | null }>(
    'SELECT current_user AS role, to_regclass($1)::text AS table',
    [migrationsTable],
  );
  const { role, table } = whoRows[0]!;
  const applied = new Set<string>();
  if (table !== null) {
    const { rows } = await client.query<{ name: string }>(`SELECT name FROM ${migrationsTable}`);
    for (const row of rows) applied.add(row.name);
  }
  const pending = shippedMigrationNames().filter((name) => !applied.has(name));
  if (pending.length > 0) {
    throw new SchemaNotMigratedError(
      `the ledger schema is not up to date (${pending.length} migration(s) not applied: ${pending.join(', ')}) and role ${role} ` +
        'may not change it: set MIGRATION_DATABASE_URL to the schema owner\'s URL (docs/operations.md, Database roles), or run the migrations as the owner first',
    );
  }
}

/** The connecting role may not migrate and the schema is behind: waiting does not help. */
export class SchemaNotMigratedError extends Error {}

/** SQLSTATE 55P03 lock_not_available: another process held the migration lock for the whole wait. */
export function isMigrationLockBusy(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === '55P03';
}
