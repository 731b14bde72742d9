import { execFile } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import type { LogSink } from '../support/log-sink.js';
import { repoRoot } from '../support/repo-root.js';
import type { PostgresEndpoint } from './temporal-cluster-config.js';

/**
 * The Temporal server's persistence on PostgreSQL before the server starts: its two databases, the
 * role that owns them, and their schemas brought to the installed server's version by the server's
 * own schema tool.
 */

const execFileAsync = promisify(execFile);
/** One schema tool command (setup-schema or update-schema of one database). */
const schemaToolTimeoutMs = 60_000;

export interface ServerPaths {
  serverBin: string;
  sqlToolBin: string;
  temporalSchemaDir: string;
  visibilitySchemaDir: string;
}

/** Locates the binaries and schema files installed by scripts/install-temporal-server.sh. */
export function resolveTemporalServerInstall(installDir?: string): ServerPaths {
  const fromEnv = process.env.TEMPORAL_SERVER_DIR;
  const dir = resolve(installDir ?? (fromEnv !== undefined && fromEnv.trim() !== '' ? fromEnv : join(repoRoot(), '.tools', 'temporal-server')));
  const paths: ServerPaths = {
    serverBin: join(dir, 'bin', 'temporal-server'),
    sqlToolBin: join(dir, 'bin', 'temporal-sql-tool'),
    temporalSchemaDir: join(dir, 'schema', 'postgresql', 'v12', 'temporal', 'versioned'),
    visibilitySchemaDir: join(dir, 'schema', 'postgresql', 'v12', 'visibility', 'versioned'),
  };
  for (const path of [paths.serverBin, paths.sqlToolBin, paths.temporalSchemaDir, paths.visibilitySchemaDir]) {
    try {
      accessSync(path, constants.R_OK);
    } catch {
      throw new Error(
        `Temporal server not installed: ${path} is missing. Run \`npm run setup\` (scripts/install-temporal-server.sh builds it into .tools/temporal-server), or set TEMPORAL_SERVER_DIR.`,
      );
    }
  }
  return paths;
}

export function parsePostgresUrl(url: string): PostgresEndpoint {
  const parsed = new URL(url);
  if (parsed.protocol !== 'postgres:' && parsed.protocol !== 'postgresql:') {
    throw new Error(`Temporal cluster: postgresUrl must be a postgres:// URL, got ${parsed.protocol}`);
  }
  return {
    host: parsed.hostname,
    port: parsed.port === '' ? 5432 : Number(parsed.port),
    user: decodeURIComponent(parsed.username),
    password: decodeURIComponent(parsed.password),
  };
}

export async function createDatabasesIfMissing(postgresUrl: string, names: readonly string[]): Promise<void> {
  const url = new URL(postgresUrl);
  url.pathname = '/postgres';
  const client = new pg.Client({ connectionString: url.toString() });
  await client.connect();
  try {
    for (const name of names) {
      const found = await client.query('select 1 from pg_database where datname = $1', [name]);
      if (found.rowCount === 0) await client.query(`create database ${client.escapeIdentifier(name)}`);
    }
  } finally {
    await client.end();
  }
}

/**
 * The server's role owns its two databases and everything in them, as a deployment's `temporal`
 * user does: the schema tool creates tables as it, and databases an earlier start filled as the
 * superuser are handed over object by object (REASSIGN OWNED cannot move a superuser's objects).
 */
export async function provisionServerRole(adminUrl: string, role: { name: string; password: string }, databases: readonly string[]): Promise<void> {
  const url = new URL(adminUrl);
  url.pathname = '/postgres';
  const client = new pg.Client({ connectionString: url.toString() });
  await client.connect();
  try {
    const name = client.escapeIdentifier(role.name);
    const exists = await client.query('select 1 from pg_roles where rolname = $1', [role.name]);
    const verb = exists.rowCount === 0 ? 'create' : 'alter';
    await client.query(`${verb} role ${name} login nosuperuser nocreatedb nocreaterole password ${client.escapeLiteral(role.password)}`);
    for (const database of databases) await client.query(`alter database ${client.escapeIdentifier(database)} owner to ${name}`);
  } finally {
    await client.end();
  }
  for (const database of databases) {
    url.pathname = `/${encodeURIComponent(database)}`;
    const db = new pg.Client({ connectionString: url.toString() });
    await db.connect();
    try {
      const owned = await db.query<{ kind: string; name: string }>(
        `select case c.relkind when 'S' then 'sequence' when 'v' then 'view' when 'm' then 'materialized view' else 'table' end as kind,
                c.relname as name
           from pg_class c join pg_namespace n on n.oid = c.relnamespace
          where n.nspname = 'public' and c.relkind in ('r', 'p', 'v', 'm', 'S')
            and pg_get_userbyid(c.relowner) <> $1
            -- A sequence owned by a column follows its table.
            and not (c.relkind = 'S' and exists (select 1 from pg_depend d where d.objid = c.oid and d.deptype in ('a', 'i')))`,
        [role.name],
      );
      for (const row of owned.rows) {
        await db.query(`alter ${row.kind} public.${db.escapeIdentifier(row.name)} owner to ${db.escapeIdentifier(role.name)}`);
      }
    } finally {
      await db.end();
    }
  }
}

/**
 * The server's own schema tool, as upstream's setup does on every start: `setup-schema -v 0.0`
 * creates the version bookkeeping (a no-op when present), `update-schema` applies every versioned
 * step newer than the database's. Safe to run again; an upgrade of the server is an upgrade here.
 */
export async function setUpSchema(
  paths: ServerPaths,
  postgres: PostgresEndpoint,
  database: string,
  versionedDir: string,
  sink: LogSink,
): Promise<void> {
  const newest = await newestSchemaVersion(versionedDir);
  const current = await currentSchemaVersion(postgres, database);
  if (current === newest) {
    sink.note(`${database}: schema at ${current}, the newest the installed server ships; nothing to apply`);
    return;
  }
  const base = ['--plugin', 'postgres12', '--ep', postgres.host, '-p', String(postgres.port), '-u', postgres.user, '--db', database];
  // The password goes through the tool's SQL_PASSWORD variable: it stays off the command line (ps).
  const env = { ...process.env, SQL_PASSWORD: postgres.password };
  for (const command of [
    ['setup-schema', '-v', '0.0'],
    ['update-schema', '-d', versionedDir],
  ]) {
    sink.note(`temporal-sql-tool ${[...base, ...command].join(' ')}`);
    try {
      const { stdout, stderr } = await execFileAsync(paths.sqlToolBin, [...base, ...command], { env, timeout: schemaToolTimeoutMs });
      sink.write(stdout);
      sink.write(stderr);
    } catch (err) {
      const failed = err as Error & { stdout?: string; stderr?: string };
      sink.write(failed.stdout ?? '');
      sink.write(failed.stderr ?? '');
      throw new Error(`temporal-sql-tool ${command[0]} on ${database} failed: ${failed.message.split('\n')[0]}\n${lastLines(failed.stderr ?? failed.stdout ?? '', 10)}`);
    }
  }
}

/** The highest `vX.Y` folder of the installed schema, as "X.Y" (what the schema tool records). */
async function newestSchemaVersion(versionedDir: string): Promise<string> {
  const versions = (await readdir(versionedDir))
    .map((name) => /^v(\d+)\.(\d+)$/.exec(name))
    .flatMap((m) => (m === null ? [] : [[Number(m[1]), Number(m[2])] as const]))
    .sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  const last = versions.at(-1);
  if (last === undefined) throw new Error(`no vX.Y schema folders in ${versionedDir}`);
  return `${last[0]}.${last[1]}`;
}

/**
 * The version the schema tool recorded in the database (its own schema_version table), or null
 * when it never ran there. Only an exact match with the newest installed version skips the tool:
 * the four tool runs cost seconds on every start.
 */
async function currentSchemaVersion(postgres: PostgresEndpoint, database: string): Promise<string | null> {
  const client = new pg.Client({ host: postgres.host, port: postgres.port, user: postgres.user, password: postgres.password, database });
  await client.connect();
  try {
    const table = await client.query<{ present: boolean }>(`select to_regclass('public.schema_version') is not null as present`);
    if (table.rows[0]?.present !== true) return null;
    const row = await client.query<{ curr_version: string }>('select curr_version from schema_version where version_partition = 0 and db_name = $1', [database]);
    return row.rows[0]?.curr_version ?? null;
  } finally {
    await client.end();
  }
}

function lastLines(text: string, count: number): string {
  return text.trim().split('\n').slice(-count).join('\n');
}
