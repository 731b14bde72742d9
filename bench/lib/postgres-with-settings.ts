import pg from 'pg';
import { startLedgerPostgres } from '../../src/runtime/local-stack.js';
import type { EmbeddedPostgres } from '../../src/stack/embedded-postgres.js';

/** What a profiling run loads: pg_stat_statements counting every statement, those inside functions and triggers too. */
export const statementProfileSettings: Readonly<Record<string, string>> = {
  shared_preload_libraries: 'pg_stat_statements',
  'pg_stat_statements.track': 'all',
};

/**
 * An embedded ledger PostgreSQL with server settings beyond its defaults. Settings such as
 * shared_preload_libraries only take effect at server start, so they are written with ALTER SYSTEM
 * and the server restarted on the same data directory.
 */
export async function startLedgerPostgresWith(
  options: Parameters<typeof startLedgerPostgres>[0],
  settings: Readonly<Record<string, string>>,
): Promise<EmbeddedPostgres> {
  const server = await startLedgerPostgres(options);
  const entries = Object.entries(settings);
  if (entries.length === 0) return server;
  try {
    const admin = new pg.Client({ connectionString: server.databaseUrl });
    await admin.connect();
    try {
      for (const [name, value] of entries) await admin.query(`ALTER SYSTEM SET ${admin.escapeIdentifier(name)} = ${admin.escapeLiteral(value)}`);
    } finally {
      await admin.end();
    }
  } finally {
    // Stopped whether the settings took or not: a refused setting must not leave a server running.
    await server.stop();
  }
  return startLedgerPostgres(options);
}
