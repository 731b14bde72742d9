import { createHash, createHmac, pbkdf2Sync, randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { PG_MIGRATE_LOCK_ID } from 'node-pg-migrate';
import type pg from 'pg';

/**
 * The two database roles the ledger is used through. The owner owns the schema and everything in it
 * and is the only one that runs migrations. The app role (what the worker, API, MCP and CLI connect
 * as) can read and write rows and call the ledger functions, nothing more: it cannot create objects,
 * truncate, or alter a table, so it cannot disable the triggers that keep postings append-only and
 * balances consistent. Only an owner (or a superuser) can.
 */
export const ledgerOwnerRole = 'chargeguard_owner';
export const ledgerAppRole = 'chargeguard_app';

export interface LedgerRoles {
  owner: { name: string; password: string };
  app: { name: string; password: string };
}

/** Attempts of one provisioning when a concurrent catalogue change got in its way (see isCatalogueRace). */
export const provisionAttemptsMax = 5;
/** The first wait before another attempt, milliseconds; doubled each time, with jitter. */
const provisionRetryFirstDelayMs = 50;
/** How long a provisioning waits for a migration holding the schema lock, milliseconds. */
const provisionLockWaitMs = 60_000;

/**
 * Creates (or brings back in line) both roles and hands `databaseName` and its `public` schema to the
 * owner, as a superuser connected to that database. Idempotent: run on every start of the embedded
 * server, so a data dir from before the roles existed (tables owned by the superuser) is converted,
 * and the stored passwords win over whatever the roles had.
 *
 * Safe to run while other processes migrate or provision: after a restart every process comes back
 * at once, and two sessions updating the same catalogue rows (a GRANT on every function while a
 * migration re-creates them; two ALTER ROLE) fail one of them with "tuple concurrently updated". So
 * the transaction first takes the migrations' own lock (migrate.ts; a transaction-scoped advisory
 * lock on the same id excludes the migration's session lock), and a race the lock cannot cover
 * (roles are shared by every database of the server, the lock is per database) is retried.
 */
export async function provisionLedgerRoles(superuser: pg.ClientBase, databaseName: string, roles: LedgerRoles): Promise<void> {
  for (let attempt = 1; ; attempt += 1) {
    try {
      await provisionOnce(superuser, databaseName, roles);
      return;
    } catch (error) {
      if (attempt >= provisionAttemptsMax || !isCatalogueRace(error)) throw error;
      const delayMs = provisionRetryFirstDelayMs * 2 ** (attempt - 1);
      await sleep(delayMs / 2 + Math.random() * delayMs);
    }
  }
}

/**
 * Errors of a concurrent change to the same catalogue rows, which the same statements succeed at
 * once the other transaction is over: "tuple concurrently updated" (XX000, internal error, told
 * apart by its fixed text), a CREATE ROLE that lost to another (23505 on pg_authid), serialization
 * failures and deadlocks.
 */
export function isCatalogueRace(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  if (code === '40001' || code === '40P01') return true;
  if (code === '23505' && typeof message === 'string' && message.includes('pg_authid')) return true;
  return code === 'XX000' && typeof message === 'string' && message.includes('tuple concurrently updated');
}

async function provisionOnce(superuser: pg.ClientBase, databaseName: string, roles: LedgerRoles): Promise<void> {
  const owner = superuser.escapeIdentifier(roles.owner.name);
  const app = superuser.escapeIdentifier(roles.app.name);
  const database = superuser.escapeIdentifier(databaseName);
  await superuser.query('BEGIN');
  try {
    await superuser.query(`SET LOCAL lock_timeout = ${provisionLockWaitMs}`);
    await superuser.query('SELECT pg_advisory_xact_lock($1)', [PG_MIGRATE_LOCK_ID]);
    await superuser.query('SET LOCAL lock_timeout = 0');
    for (const role of [roles.owner, roles.app]) {
      const exists = await superuser.query('SELECT 1 FROM pg_roles WHERE rolname = $1', [role.name]);
      const name = superuser.escapeIdentifier(role.name);
      if (exists.rowCount === 0) await superuser.query(`CREATE ROLE ${name}`);
      // Stated every time: a role someone widened by hand is narrowed again.
      await superuser.query(
        `ALTER ROLE ${name} WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD ${superuser.escapeLiteral(scramVerifier(role.password))}`,
      );
    }
    await superuser.query(`ALTER DATABASE ${database} OWNER TO ${owner}`);
    await superuser.query(`ALTER SCHEMA public OWNER TO ${owner}`);
    await superuser.query('REVOKE CREATE ON SCHEMA public FROM PUBLIC');
    await superuser.query(`REVOKE CREATE ON DATABASE ${database} FROM PUBLIC`);
    await superuser.query(`GRANT CONNECT ON DATABASE ${database} TO ${app}`);
    await transferSchemaObjects(superuser, roles.owner.name);
    await superuser.query(`GRANT USAGE ON SCHEMA public TO ${app}`);
    await superuser.query(`GRANT ${appTablePrivileges} ON ALL TABLES IN SCHEMA public TO ${app}`);
    await superuser.query(`GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO ${app}`);
    await superuser.query(`GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO ${app}`);
    // Objects later migrations create (as the owner) get the same grants without anyone remembering to.
    await superuser.query(`ALTER DEFAULT PRIVILEGES FOR ROLE ${owner} IN SCHEMA public GRANT ${appTablePrivileges} ON TABLES TO ${app}`);
    await superuser.query(`ALTER DEFAULT PRIVILEGES FOR ROLE ${owner} IN SCHEMA public GRANT USAGE ON SEQUENCES TO ${app}`);
    await superuser.query(`ALTER DEFAULT PRIVILEGES FOR ROLE ${owner} IN SCHEMA public GRANT EXECUTE ON FUNCTIONS TO ${app}`);
    await superuser.query('COMMIT');
  } catch (error) {
    await superuser.query('ROLLBACK').catch(() => undefined);
    throw error;
  }
}

/** RFC 7677 / PostgreSQL's default iteration count. */
const scramIterations = 4096;

/**
 * The SCRAM-SHA-256 verifier PostgreSQL stores for `password`, computed here so the statement (and
 * the server log, should the statement fail) never carries the password itself. The passwords this
 * is used for are ASCII, for which SASLprep changes nothing.
 */
export function scramVerifier(password: string, salt: Buffer = randomBytes(16)): string {
  const salted = pbkdf2Sync(password, salt, scramIterations, 32, 'sha256');
  const clientKey = createHmac('sha256', salted).update('Client Key').digest();
  const storedKey = createHash('sha256').update(clientKey).digest();
  const serverKey = createHmac('sha256', salted).update('Server Key').digest();
  return `SCRAM-SHA-256$${scramIterations}:${salt.toString('base64')}$${storedKey.toString('base64')}:${serverKey.toString('base64')}`;
}

/** Row access only: no TRUNCATE (it skips row triggers), no REFERENCES, no TRIGGER. */
const appTablePrivileges = 'SELECT, INSERT, UPDATE, DELETE';

/**
 * Gives the owner every object of the public schema another role owns (a data dir migrated as the
 * superuser before the owner role existed). Sequences that belong to a column move with their table.
 */
async function transferSchemaObjects(superuser: pg.ClientBase, ownerName: string): Promise<void> {
  const owner = superuser.escapeIdentifier(ownerName);
  const relations = await superuser.query<{ name: string; kind: string }>(
    `SELECT format('%I.%I', n.nspname, c.relname) AS name, c.relkind::text AS kind
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
        AND pg_get_userbyid(c.relowner) <> $1
        AND NOT (c.relkind = 'S' AND EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype IN ('a', 'i')))`,
    [ownerName],
  );
  const alterKeyword: Record<string, string> = { r: 'TABLE', p: 'TABLE', v: 'VIEW', m: 'MATERIALIZED VIEW', f: 'FOREIGN TABLE', S: 'SEQUENCE' };
  for (const relation of relations.rows) await superuser.query(`ALTER ${alterKeyword[relation.kind]} ${relation.name} OWNER TO ${owner}`);
  const routines = await superuser.query<{ signature: string; kind: string }>(
    `SELECT p.oid::regprocedure::text AS signature, p.prokind::text AS kind
       FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
      WHERE n.nspname = 'public' AND pg_get_userbyid(p.proowner) <> $1`,
    [ownerName],
  );
  for (const routine of routines.rows) {
    await superuser.query(`ALTER ${routine.kind === 'p' ? 'PROCEDURE' : 'FUNCTION'} ${routine.signature} OWNER TO ${owner}`);
  }
  // Enums, domains and ranges; a table's row type, array and multirange types follow their owner.
  const types = await superuser.query<{ name: string; kind: string }>(
    `SELECT format('%I.%I', n.nspname, t.typname) AS name, t.typtype::text AS kind
       FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
      WHERE n.nspname = 'public' AND t.typtype IN ('e', 'd', 'r') AND pg_get_userbyid(t.typowner) <> $1`,
    [ownerName],
  );
  for (const type of types.rows) await superuser.query(`ALTER ${type.kind === 'd' ? 'DOMAIN' : 'TYPE'} ${type.name} OWNER TO ${owner}`);
}
