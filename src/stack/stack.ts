import { join, resolve } from 'node:path';
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
  databaseUrl: string;
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
    databaseUrl: postgres.value.value,
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

async function startPostgres(dataDir: string, logsDir: string, log: (line: string) => void): Promise<Service<string>> {
  const external = nonEmptyEnv('DATABASE_URL');
  if (external !== null) {
    log(`postgres: using DATABASE_URL=${redactPassword(external)}`);
    return { value: external, stop: async () => undefined };
  }
  const startedAtMs = Date.now();
  const logFilePath = join(logsDir, 'postgres.log');
  const server = await startEmbeddedPostgres({ dataDir: join(dataDir, 'postgres'), logFilePath });
  log(`postgres: embedded server ready at ${redactPassword(server.databaseUrl)} (${Date.now() - startedAtMs} ms, log ${logFilePath})`);
  return {
    value: server.databaseUrl,
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

function redactPassword(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== '') parsed.password = '***';
    return parsed.toString();
  } catch {
    return url;
  }
}
