import pg from 'pg';
import { describe, expect, inject, it } from 'vitest';
import { migrateLedger, SchemaNotMigratedError } from '../src/ledger/migrate.js';
import { createLedgerPool } from '../src/ledger/pool.js';
import { ledgerAppRole, ledgerOwnerRole, provisionLedgerRoles } from '../src/ledger/roles.js';
import { chargeBody, fundedTenant, newKey, openScratchLedger, useHarness } from './support/harness.js';

// The tests connect as the app role (test/support/global-setup.ts): everything the harness does
// in other files already runs without DDL rights. This file checks what that role may NOT do.
const h = useHarness();

async function withClient<T>(url: string, run: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await run(client);
  } finally {
    await client.end();
  }
}

/** The SQLSTATE a statement failed with, or null when it succeeded (then rolled back, so nothing sticks). */
async function sqlstateOf(client: pg.Client, sql: string, params: unknown[] = []): Promise<string | null> {
  await client.query('BEGIN');
  try {
    await client.query(sql, params);
    return null;
  } catch (error) {
    return (error as { code?: string }).code ?? 'no code';
  } finally {
    await client.query('ROLLBACK');
  }
}

const insufficientPrivilege = '42501';
const appendOnlyRefusal = 'CGJ01';

describe('the service connects as a role that cannot change the schema', () => {
  it('is the app role: no superuser, no CREATEDB, owns nothing', async () => {
    await withClient(inject('stack').databaseUrl, async (client) => {
      const { rows } = await client.query<{ user: string; super: boolean; createdb: boolean; owned: number; create: boolean }>(
        `SELECT current_user AS user, r.rolsuper AS super, r.rolcreatedb AS createdb,
                (SELECT count(*)::int FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE n.nspname = 'public' AND c.relowner = r.oid) AS owned,
                has_schema_privilege('public', 'CREATE') AS create
           FROM pg_roles r WHERE r.rolname = current_user`,
      );
      expect(rows[0]).toEqual({ user: ledgerAppRole, super: false, createdb: false, owned: 0, create: false });
    });
  });

  it('cannot disable, drop or replace the append-only triggers, nor update, delete or truncate postings', async () => {
    const tenant = await fundedTenant(h, { label: 'roles', payerMinor: 1_000 });
    const rowsOf = async (client: pg.Client) =>
      (await client.query<{ n: number }>('SELECT count(*)::int AS n FROM journal_entries WHERE tenant = $1', [tenant])).rows[0]!.n;
    await withClient(inject('stack').databaseUrl, async (client) => {
      const before = await rowsOf(client);
      expect(before).toBeGreaterThan(0);
      const attempts: Record<string, string> = {
        'ALTER TABLE journal_entries DISABLE TRIGGER ALL': insufficientPrivilege,
        'ALTER TABLE transfers DISABLE TRIGGER transfers_append_only': insufficientPrivilege,
        'DROP TRIGGER journal_entries_append_only ON journal_entries': insufficientPrivilege,
        "CREATE OR REPLACE FUNCTION ledger_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN OLD; END $$": insufficientPrivilege,
        'SET session_replication_role = replica': insufficientPrivilege,
        'TRUNCATE journal_entries': insufficientPrivilege,
        'TRUNCATE refunds': insufficientPrivilege,
        'CREATE TABLE sneaky (id int)': insufficientPrivilege,
        'ALTER TABLE accounts DROP CONSTRAINT IF EXISTS accounts_check': insufficientPrivilege,
      };
      const outcomes: Record<string, string | null> = {};
      for (const sql of Object.keys(attempts)) outcomes[sql] = await sqlstateOf(client, sql);
      expect(outcomes).toEqual(attempts);
      // Row access is granted, so the trigger itself is what refuses these.
      expect(await sqlstateOf(client, 'UPDATE journal_entries SET amount_minor = amount_minor + 1 WHERE tenant = $1', [tenant])).toBe(appendOnlyRefusal);
      expect(await sqlstateOf(client, 'DELETE FROM journal_entries WHERE tenant = $1', [tenant])).toBe(appendOnlyRefusal);
      expect(await sqlstateOf(client, 'DELETE FROM transfers WHERE tenant = $1', [tenant])).toBe(appendOnlyRefusal);
      expect(await rowsOf(client)).toBe(before);
    });
  });

  it('runs a charge end to end (the worker and this client are the app role)', async () => {
    const tenant = await fundedTenant(h, { label: 'roles-charge', payerMinor: 1_000 });
    const result = await h.client.charge(tenant, newKey('roles'), chargeBody({ amount: 250 }));
    expect(result.charge.status).toBe('succeeded');
  });

  it('the owner ran the migrations, owns every table, and is no superuser', async () => {
    await withClient(inject('stack').migrationDatabaseUrl, async (client) => {
      const { rows } = await client.query<{ user: string; super: boolean; foreign: string[] }>(
        `SELECT current_user AS user, (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) AS super,
                coalesce((SELECT array_agg(c.relname::text ORDER BY c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                           WHERE n.nspname = 'public' AND c.relkind IN ('r', 'v', 'S') AND pg_get_userbyid(c.relowner) <> current_user), '{}') AS foreign`,
      );
      expect(rows[0]).toEqual({ user: ledgerOwnerRole, super: false, foreign: [] });
    });
  });

  it('a table a later migration creates is usable by the app role without a new grant (default privileges)', async () => {
    const table = `probe_${newKey('default').replace(/[^a-z0-9]/g, '_')}`;
    await withClient(inject('stack').migrationDatabaseUrl, (owner) => owner.query(`CREATE TABLE ${table} (id bigserial PRIMARY KEY, note text)`));
    try {
      await withClient(inject('stack').databaseUrl, async (app) => {
        await app.query(`INSERT INTO ${table} (note) VALUES ('written by the app role')`);
        await app.query(`UPDATE ${table} SET note = note || '.'`);
        expect((await app.query(`SELECT note FROM ${table}`)).rows).toEqual([{ note: 'written by the app role.' }]);
        await app.query(`DELETE FROM ${table}`);
        expect(await sqlstateOf(app, `ALTER TABLE ${table} ADD COLUMN extra int`)).toBe(insufficientPrivilege);
        expect(await sqlstateOf(app, `DROP TABLE ${table}`)).toBe(insufficientPrivilege);
      });
    } finally {
      await withClient(inject('stack').migrationDatabaseUrl, (owner) => owner.query(`DROP TABLE ${table}`));
    }
  });

  it('migrating as the app role only checks: a schema that is behind fails naming MIGRATION_DATABASE_URL', async () => {
    // The shared ledger is up to date: the check passes without changing anything.
    await expect(migrateLedger(inject('stack').databaseUrl)).resolves.toBeUndefined();

    const admin = new pg.Client({ connectionString: inject('stack').adminDatabaseUrl });
    await admin.connect();
    const database = `roles_${newKey('empty').replace(/[^a-z0-9]/g, '_')}`;
    await admin.query(`CREATE DATABASE ${database}`);
    try {
      const appUrl = new URL(inject('stack').databaseUrl);
      appUrl.pathname = `/${database}`;
      const failure = await migrateLedger(appUrl.toString()).then(() => null, (error: unknown) => error);
      expect(failure).toBeInstanceOf(SchemaNotMigratedError);
      expect((failure as Error).message).toMatch(/not up to date \(\d+ migration\(s\) not applied: 1763800000000_ledger, /);
      expect((failure as Error).message).toContain(`role ${ledgerAppRole} may not change it: set MIGRATION_DATABASE_URL`);
    } finally {
      await admin.query(`DROP DATABASE ${database} WITH (FORCE)`);
      await admin.end();
    }
  });

  it('provisioning converts a ledger the superuser migrated: the owner takes every object, the app role gets rows only', async () => {
    const scratch = await openScratchLedger(h.pool, { maxConnections: 1 });
    const suffix = newKey('r').replace(/[^a-z0-9]/g, '_');
    const roles = { owner: { name: `owner_${suffix}`, password: `o${suffix}` }, app: { name: `app_${suffix}`, password: `a${suffix}` } };
    const superuser = new pg.Client({ connectionString: scratch.databaseUrl });
    await superuser.connect();
    try {
      const database = new URL(scratch.databaseUrl).pathname.slice(1);
      await provisionLedgerRoles(superuser, database, roles);
      // Twice: it runs on every start of the embedded server.
      await provisionLedgerRoles(superuser, database, roles);
      const urlAs = (role: { name: string; password: string }) => {
        const url = new URL(scratch.databaseUrl);
        url.username = role.name;
        url.password = role.password;
        return url.toString();
      };
      const foreign = await superuser.query(
        `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = 'public' AND pg_get_userbyid(c.relowner) <> $1
         UNION ALL
         SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname = 'public' AND pg_get_userbyid(p.proowner) <> $1`,
        [roles.owner.name],
      );
      expect(foreign.rows).toEqual([]);
      // The owner can run the migrations (and re-create the functions) on what the superuser made.
      await migrateLedger(urlAs(roles.owner));
      const appPool = createLedgerPool({ databaseUrl: urlAs(roles.app), maxConnections: 2 });
      try {
        const tenant = await fundedTenant(appPool, { label: 'converted', payerMinor: 500 });
        const opened = await appPool.query("SELECT id FROM accounts WHERE tenant = $1 AND id IN ('payer', 'payee') ORDER BY id", [tenant]);
        expect(opened.rows).toEqual([{ id: 'payee' }, { id: 'payer' }]);
      } finally {
        await appPool.end();
      }
      await withClient(urlAs(roles.app), async (app) => {
        expect(await sqlstateOf(app, 'ALTER TABLE journal_entries DISABLE TRIGGER ALL')).toBe(insufficientPrivilege);
        expect(await sqlstateOf(app, 'CREATE TABLE sneaky (id int)')).toBe(insufficientPrivilege);
      });
      // As on PostgreSQL before 15 without the REVOKE: the app role may create in public, but it does
      // not own the ledger, so it only checks (re-creating the functions would fail as not their owner).
      await superuser.query(`GRANT CREATE ON SCHEMA public TO ${roles.app.name}`);
      await expect(migrateLedger(urlAs(roles.app))).resolves.toBeUndefined();
    } finally {
      await superuser.end();
      await scratch.drop();
      await withClient(inject('stack').adminDatabaseUrl, async (admin) => {
        // Their grants and default privileges lived in the dropped database; the roles own nothing left.
        await admin.query(`DROP ROLE ${roles.app.name}`);
        await admin.query(`DROP ROLE ${roles.owner.name}`);
      });
    }
  });
});
