import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { describe, expect, inject, it } from 'vitest';
import { migrateLedger } from '../src/ledger/migrate.js';
import { provisionLedgerRoles, type LedgerRoles } from '../src/ledger/roles.js';

/**
 * After a PostgreSQL restart every process comes back at once: the embedded server's start
 * provisions the roles (grants on every function) while workers and API processes reconnect and
 * migrate (re-creating the ledger functions). Catalogue rows updated by two sessions at once fail
 * one of them with "tuple concurrently updated" unless the two are serialised.
 */
describe('role provisioning and migrations run concurrently from every process', () => {
  it('N concurrent provisionings and migrations against one fresh database all succeed', { timeout: 180_000 }, async () => {
    const suffix = randomBytes(4).toString('hex');
    const databaseName = `concurrent_setup_${suffix}`;
    // Roles of the test's own: the shared stack's roles (and their passwords) are left alone.
    const roles: LedgerRoles = {
      owner: { name: `t_owner_${suffix}`, password: randomBytes(12).toString('hex') },
      app: { name: `t_app_${suffix}`, password: randomBytes(12).toString('hex') },
    };
    const adminUrl = inject('stack').adminDatabaseUrl;
    const admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${databaseName}`);
    const url = new URL(adminUrl);
    url.pathname = `/${databaseName}`;
    const databaseUrl = url.toString();
    const provision = async (): Promise<void> => {
      const client = new pg.Client({ connectionString: databaseUrl });
      await client.connect();
      try {
        await provisionLedgerRoles(client, databaseName, roles);
      } finally {
        await client.end();
      }
    };
    try {
      const processes = 8;
      const rounds = 3;
      const outcomes = await Promise.allSettled(
        Array.from({ length: processes }, async (_, index) => {
          // As a restart interleaves them: some processes provision first, others migrate first.
          for (let round = 0; round < rounds; round += 1) {
            if ((index + round) % 2 === 0) {
              await provision();
              await migrateLedger(databaseUrl);
            } else {
              await migrateLedger(databaseUrl);
              await provision();
            }
          }
        }),
      );
      const failures = outcomes.flatMap((o) => (o.status === 'rejected' ? [String((o.reason as Error).message)] : []));
      expect(failures).toEqual([]);
      // The end state is the one a single provisioning gives: the app role may run the ledger's functions.
      const check = new pg.Client({ connectionString: databaseUrl });
      await check.connect();
      try {
        const { rows } = await check.query<{ missing: number }>(
          `SELECT count(*)::int AS missing FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = 'public' AND NOT has_function_privilege($1, p.oid, 'EXECUTE')`,
          [roles.app.name],
        );
        expect(rows[0]!.missing).toBe(0);
        const owned = await check.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'public' AND c.relname = 'charges' AND pg_get_userbyid(c.relowner) = $1`,
          [roles.owner.name],
        );
        expect(owned.rows[0]!.n).toBe(1);
      } finally {
        await check.end();
      }
    } finally {
      await admin.query(`DROP DATABASE IF EXISTS ${databaseName} WITH (FORCE)`);
      for (const role of [roles.app.name, roles.owner.name]) await admin.query(`DROP ROLE IF EXISTS ${role}`);
      await admin.end();
    }
  });
});
