import { fileURLToPath } from 'node:url';
import { runner } from 'node-pg-migrate';

const migrationsDir = fileURLToPath(new URL('./migrations', import.meta.url));

/**
 * Brings the schema up to date. node-pg-migrate holds an advisory lock meanwhile, so several
 * processes starting at once (workers, API, test files) migrate exactly once.
 */
export async function migrateLedger(databaseUrl: string, log: (line: string) => void = () => {}): Promise<void> {
  await runner({
    databaseUrl,
    dir: migrationsDir,
    direction: 'up',
    migrationsTable: 'ledger_migrations',
    count: Infinity,
    checkOrder: true,
    log,
    logger: { debug: () => {}, info: log, warn: log, error: log },
  });
}
