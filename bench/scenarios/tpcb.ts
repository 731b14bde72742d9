import { execFile, spawn } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { promisify } from 'node:util';
import pg from 'pg';
import { runClosedLoop, type PhaseResult } from '../lib/load.js';
import { summariseLatencies } from '../lib/stats.js';

/**
 * P2's baseline: the TPC-B-like transaction of pgbench (`-b tpcb-like`), against the same
 * PostgreSQL, in a schema of its own so it never touches the ledger's tables.
 */
export const tpcbSchema = 'bench_tpcb';

const execFileAsync = promisify(execFile);

/** Creates pgbench's four tables at `scale` (as `pgbench -i -I dtGvp` does, generated server-side). */
export async function initTpcb(databaseUrl: string, scale: number): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS ${tpcbSchema} CASCADE`);
    await client.query(`CREATE SCHEMA ${tpcbSchema}`);
    await client.query(`SET search_path = ${tpcbSchema}`);
    await client.query(`CREATE TABLE pgbench_history (tid int, bid int, aid int, delta int, mtime timestamp, filler char(22))`);
    await client.query(`CREATE TABLE pgbench_tellers (tid int NOT NULL, bid int, tbalance int, filler char(84)) WITH (fillfactor = 100)`);
    await client.query(`CREATE TABLE pgbench_accounts (aid int NOT NULL, bid int, abalance int, filler char(84)) WITH (fillfactor = 100)`);
    await client.query(`CREATE TABLE pgbench_branches (bid int NOT NULL, bbalance int, filler char(88)) WITH (fillfactor = 100)`);
    await client.query(`INSERT INTO pgbench_branches (bid, bbalance) SELECT bid, 0 FROM generate_series(1, $1::int) AS bid`, [scale]);
    await client.query(
      `INSERT INTO pgbench_tellers (tid, bid, tbalance) SELECT tid, (tid - 1) / 10 + 1, 0 FROM generate_series(1, $1::int * 10) AS tid`,
      [scale],
    );
    await client.query(
      `INSERT INTO pgbench_accounts (aid, bid, abalance, filler)
       SELECT aid, (aid - 1) / 100000 + 1, 0, '' FROM generate_series(1, $1::int * 100000) AS aid`,
      [scale],
    );
    await client.query('ALTER TABLE pgbench_branches ADD PRIMARY KEY (bid)');
    await client.query('ALTER TABLE pgbench_tellers ADD PRIMARY KEY (tid)');
    await client.query('ALTER TABLE pgbench_accounts ADD PRIMARY KEY (aid)');
    await client.query('VACUUM ANALYZE pgbench_branches, pgbench_tellers, pgbench_accounts, pgbench_history');
  } finally {
    await client.end();
  }
}

export async function dropTpcb(databaseUrl: string): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS ${tpcbSchema} CASCADE`);
  } finally {
    await client.end();
  }
}

/** pgbench's tpcb-like script, statement for statement, one round trip each, with `pg`. */
export async function runTpcbWithPg(
  databaseUrl: string,
  options: { label: string; concurrency: number; scale: number; warmupMs: number; durationMs: number },
): Promise<PhaseResult> {
  const pool = new pg.Pool({
    connectionString: databaseUrl,
    max: options.concurrency,
    options: `-c search_path=${tpcbSchema}`,
  });
  const { scale } = options;
  try {
    return await runClosedLoop({
      label: options.label,
      concurrency: options.concurrency,
      warmupMs: options.warmupMs,
      durationMs: options.durationMs,
      maxOperations: 5_000_000,
      operation: async () => {
        const aid = randomInt(1, 100_000 * scale + 1);
        const bid = randomInt(1, scale + 1);
        const tid = randomInt(1, 10 * scale + 1);
        const delta = randomInt(-5000, 5001);
        const client = await pool.connect();
        // A connection whose ROLLBACK failed is in an unknown state: destroyed, never reused.
        let broken: Error | undefined;
        try {
          await client.query('BEGIN');
          await client.query('UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2', [delta, aid]);
          await client.query('SELECT abalance FROM pgbench_accounts WHERE aid = $1', [aid]);
          await client.query('UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2', [delta, tid]);
          await client.query('UPDATE pgbench_branches SET bbalance = bbalance + $1 WHERE bid = $2', [delta, bid]);
          await client.query(
            'INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)',
            [tid, bid, aid, delta],
          );
          await client.query('COMMIT');
        } catch (error) {
          await client.query('ROLLBACK').catch((rollbackError: unknown) => {
            broken = rollbackError as Error;
          });
          throw error;
        } finally {
          client.release(broken);
        }
      },
    });
  } finally {
    await pool.end();
  }
}

/** The pgbench binary's version line, or null when it is not installed. */
export async function pgbenchVersion(): Promise<string | null> {
  try {
    const { stdout } = await execFileAsync('pgbench', ['--version'], { timeout: 5_000 });
    return stdout.trim();
  } catch {
    return null;
  }
}

/** pgbench itself (a C client, so the cheapest possible driver) with its built-in tpcb-like script. */
export async function runPgbench(
  databaseUrl: string,
  options: { label: string; concurrency: number; durationMs: number },
): Promise<PhaseResult> {
  const url = new URL(databaseUrl);
  const durationS = Math.max(1, Math.round(options.durationMs / 1000));
  const args = ['-n', '-b', 'tpcb-like', '-c', String(options.concurrency), '-j', String(Math.min(2, options.concurrency)), '-T', String(durationS)];
  const env = {
    ...process.env,
    PGHOST: url.hostname,
    PGPORT: url.port || '5432',
    PGUSER: decodeURIComponent(url.username),
    PGPASSWORD: decodeURIComponent(url.password),
    PGDATABASE: decodeURIComponent(url.pathname.slice(1)),
    PGOPTIONS: `-c search_path=${tpcbSchema}`,
  };
  process.stderr.write(`${options.label}: pgbench ${args.join(' ')}\n`);
  const output = await new Promise<string>((resolve, reject) => {
    const child = spawn('pgbench', args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let text = '';
    child.stdout.on('data', (chunk: Buffer) => (text += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (text += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), options.durationMs + 60_000);
    child.once('error', reject);
    child.once('exit', (code) => {
      clearTimeout(timer);
      if (code === 0) resolve(text);
      else reject(new Error(`pgbench exited with ${code}: ${text.slice(-500)}`));
    });
  });
  const tps = Number(/tps = ([\d.]+) \(without initial connection time\)/.exec(output)?.[1]);
  const processed = Number(/number of transactions actually processed: (\d+)/.exec(output)?.[1]);
  const failed = Number(/number of failed transactions: (\d+)/.exec(output)?.[1] ?? 0);
  const latencyAverageMs = Number(/latency average = ([\d.]+) ms/.exec(output)?.[1]);
  if (!Number.isFinite(tps)) throw new Error(`could not read tps from pgbench output: ${output.slice(-500)}`);
  // pgbench reports only the mean latency unless asked to log every transaction.
  const latency = { ...summariseLatencies([]), count: processed, meanMs: latencyAverageMs };
  process.stderr.write(`${options.label}: ${processed} txns, ${tps.toFixed(0)} tps\n`);
  return {
    label: options.label,
    concurrency: options.concurrency,
    completed: processed,
    failed,
    windowMs: durationS * 1000,
    operationsPerSecond: tps,
    latency,
    failureSamples: [],
  };
}
