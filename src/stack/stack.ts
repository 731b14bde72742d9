import { join, resolve } from 'node:path';
import { maskUrlPassword } from '../support/redact.js';
import { startEmbeddedPostgres } from './embedded-postgres.js';
import { startTemporalDevServer } from './temporal-dev-server.js';

export interface LocalStackOptions {
  /** Root for everything the stack persists: temporal.sqlite, postgres/, logs/. */
  dataDir: string;
  log?: (line: string) => void;
  /** Temporal Web UI port; 8233 by default (docs/contract.md, Running). null runs without UI. */
  temporalUiPort?: number | null;
}

export interface LocalStack {
  temporalAddress: string;
  /** The app role's URL (rows and ledger functions only); what the service connects with. */
  databaseUrl: string;
  /** The schema owner's URL, for migrations (DATABASE_URL again when MIGRATION_DATABASE_URL is not set). */
  migrationDatabaseUrl: string;
  /** The embedded server's superuser (tests' scratch databases); null with an external DATABASE_URL. */
  adminDatabaseUrl: string | null;
  /** The embedded server's password file (PGPASSFILE) for the two roles; null with an external DATABASE_URL. */
  passwordFilePath: string | null;
  temporalUiUrl: string | null;
  stop(): Promise<void>;
}

interface Service<T> {
  value: T;
  stop(): Promise<void>;
}

const defaultTemporalUiPort = 8233;

/**
 * Brings up what the worker and API need: a Temporal dev server persisted to SQLite and an
 * embedded PostgreSQL, both under `dataDir`, started in parallel. TEMPORAL_ADDRESS / DATABASE_URL
 * point at existing infrastructure instead, and then nothing is started for that half.
 */
export async function startLocalStack(opts: LocalStackOptions): Promise<LocalStack> {
  const dataDir = resolve(opts.dataDir);
  const logsDir = join(dataDir, 'logs');
  const log = opts.log ?? (() => undefined);

  const temporalStart = startTemporal(dataDir, logsDir, opts.temporalUiPort, log);
  const postgresStart = startPostgres(dataDir, logsDir, log);
  const [temporal, postgres] = await Promise.allSettled([temporalStart, postgresStart]);

  if (temporal.status === 'rejected' || postgres.status === 'rejected') {
    // Do not leave the half that did come up running.
    const started = [temporal, postgres].flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    await Promise.allSettled(started.map((service) => service.stop()));
    const errors = [temporal, postgres].flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
    throw errors.length === 1 ? errors[0] : new AggregateError(errors, errors.map((e) => (e as Error).message).join('\n\n'));
  }

  let stopping: Promise<void> | null = null;
  return {
    temporalAddress: temporal.value.value.address,
    temporalUiUrl: temporal.value.value.uiUrl,
    ...postgres.value.value,
    stop: () => {
      stopping ??= (async () => {
        const results = await Promise.allSettled([temporal.value.stop(), postgres.value.stop()]);
        const errors = results.flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
        if (errors.length > 0) throw new AggregateError(errors, 'Failed to stop the local stack cleanly');
        log('local stack stopped');
      })();
      return stopping;
    },
  };
}

async function startTemporal(
  dataDir: string,
  logsDir: string,
  uiPort: number | null | undefined,
  log: (line: string) => void,
): Promise<Service<{ address: string; uiUrl: string | null }>> {
  const external = nonEmptyEnv('TEMPORAL_ADDRESS');
  if (external !== null) {
    log(`temporal: using TEMPORAL_ADDRESS=${external}`);
    return { value: { address: external, uiUrl: null }, stop: async () => undefined };
  }
  const startedAtMs = Date.now();
  const logFilePath = join(logsDir, 'temporal.log');
  const server = await startTemporalDevServer({
    dbFilePath: join(dataDir, 'temporal.sqlite'),
    uiPort: uiPort === undefined ? defaultTemporalUiPort : uiPort,
    logFilePath,
  });
  log(
    `temporal: dev server ready at ${server.address}` +
      (server.uiUrl ? `, Web UI ${server.uiUrl}` : '') +
      ` (${Date.now() - startedAtMs} ms, log ${logFilePath})`,
  );
  return {
    value: { address: server.address, uiUrl: server.uiUrl },
    stop: async () => {
      const stopStartedAtMs = Date.now();
      await server.stop();
      log(`temporal: dev server stopped (${Date.now() - stopStartedAtMs} ms)`);
    },
  };
}

type PostgresUrls = Pick<LocalStack, 'databaseUrl' | 'migrationDatabaseUrl' | 'adminDatabaseUrl' | 'passwordFilePath'>;

async function startPostgres(dataDir: string, logsDir: string, log: (line: string) => void): Promise<Service<PostgresUrls>> {
  const external = nonEmptyEnv('DATABASE_URL');
  if (external !== null) {
    const migration = nonEmptyEnv('MIGRATION_DATABASE_URL');
    log(`postgres: using DATABASE_URL=${maskUrlPassword(external, 'DATABASE_URL')}` + (migration ? `, migrating with MIGRATION_DATABASE_URL=${maskUrlPassword(migration, 'MIGRATION_DATABASE_URL')}` : ''));
    return {
      value: { databaseUrl: external, migrationDatabaseUrl: migration ?? external, adminDatabaseUrl: null, passwordFilePath: null },
      stop: async () => undefined,
    };
  }
  const startedAtMs = Date.now();
  const logFilePath = join(logsDir, 'postgres.log');
  const server = await startEmbeddedPostgres({ dataDir: join(dataDir, 'postgres'), logFilePath });
  log(`postgres: embedded server ready at ${maskUrlPassword(server.appDatabaseUrl)} (${Date.now() - startedAtMs} ms, log ${logFilePath})`);
  return {
    value: {
      databaseUrl: server.appDatabaseUrl,
      migrationDatabaseUrl: server.ownerDatabaseUrl,
      adminDatabaseUrl: server.databaseUrl,
      passwordFilePath: server.passwordFilePath,
    },
    stop: async () => {
      const stopStartedAtMs = Date.now();
      await server.stop();
      log(`postgres: embedded server stopped (${Date.now() - stopStartedAtMs} ms)`);
    },
  };
}

function nonEmptyEnv(name: string): string | null {
  const value = process.env[name];
  return value === undefined || value.trim() === '' ? null : value.trim();
}
