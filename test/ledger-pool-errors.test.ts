import { describe, expect, inject, it } from 'vitest';
import { createLedgerPool } from '../src/ledger/pool.js';

describe('the ledger pool when PostgreSQL drops a connection', () => {
  it('a connection that dies while checked out fails its statement, crashes nothing, and the pool serves again', async () => {
    const pool = createLedgerPool({ databaseUrl: inject('stack').databaseUrl, maxConnections: 2 });
    const uncaught: unknown[] = [];
    const onUncaught = (error: unknown): void => void uncaught.push(error);
    process.on('uncaughtException', onUncaught);
    try {
      const client = await pool.connect();
      const { rows } = await client.query<{ pid: number }>('select pg_backend_pid() as pid');
      // The client sits checked out and idle, as between two statements of a transaction, when
      // its server process goes away (a crash, a restart, an operator's terminate).
      const ended = new Promise<void>((resolve) => client.once('end', () => resolve()));
      await pool.query('select pg_terminate_backend($1)', [rows[0]!.pid]);
      // Bounded: without a listener of the pool's, the dropped connection's error escapes instead.
      let deadline: NodeJS.Timeout | undefined;
      await Promise.race([
        ended,
        new Promise<never>((_, reject) => (deadline = setTimeout(() => reject(new Error('the client never saw its connection end')), 10_000))),
      ]).finally(() => clearTimeout(deadline));
      await expect(client.query('select 1')).rejects.toThrow();
      client.release(true);
      expect((await pool.query<{ one: number }>('select 1 as one')).rows[0]!.one).toBe(1);
      expect(uncaught).toEqual([]);
    } finally {
      process.off('uncaughtException', onUncaught);
      await pool.end();
    }
  });
});
