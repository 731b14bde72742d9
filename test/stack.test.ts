import { spawn } from 'node:child_process';
import { chmod, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { getPriority, tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findFreePort } from '../src/support/free-port.js';
import type { LocalStack } from '../src/stack/stack.js';
import { startChargeguardStack } from '../src/runtime/local-stack.js';
import { nicenessOfProcessTree } from './support/thread-niceness.js';

const stackTimeoutMs = 120_000;

/** Resolves with the socket error code, or 'connected' if something still listens. */
function probe(host: string, port: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    socket.setTimeout(2_000, () => {
      socket.destroy();
      resolve('timeout');
    });
    socket.once('connect', () => {
      socket.destroy();
      resolve('connected');
    });
    socket.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
  });
}

function hostPort(urlOrAddress: string): { host: string; port: number } {
  const url = new URL(urlOrAddress.includes('://') ? urlOrAddress : `tcp://${urlOrAddress}`);
  return { host: url.hostname, port: Number(url.port) };
}

async function withPg<T>(databaseUrl: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

async function withTemporal<T>(address: string, fn: (connection: Connection) => Promise<T>): Promise<T> {
  const connection = await Connection.connect({ address });
  try {
    return await fn(connection);
  } finally {
    await connection.close();
  }
}

/** A pid that certainly belonged to a process which has exited. */
async function deadPid(): Promise<number> {
  const child = spawn(process.execPath, ['-e', '']);
  await new Promise((resolve) => child.once('exit', resolve));
  return child.pid!;
}

describe('local stack (Temporal dev server + embedded PostgreSQL)', () => {
  let dataRoot: string;
  let running: LocalStack | null = null;
  const savedEnv = { TEMPORAL_ADDRESS: process.env.TEMPORAL_ADDRESS, DATABASE_URL: process.env.DATABASE_URL };
  const lines: string[] = [];
  let firstStart: Pick<LocalStack, 'temporalAddress' | 'databaseUrl' | 'migrationDatabaseUrl'> | null = null;
  // Above whatever this test runs at, so that the servers' niceness is the stack's doing.
  const serverNiceness = Math.min(19, getPriority(0) + 3);

  beforeAll(async () => {
    // Both servers must be started by the stack, not borrowed from the environment.
    delete process.env.TEMPORAL_ADDRESS;
    delete process.env.DATABASE_URL;
    dataRoot = await mkdtemp(join(tmpdir(), 'chargeguard-stack-'));
    // mkdtemp makes the dir 0700; when we run as root, PostgreSQL runs as the `postgres` OS user,
    // which must be able to enter it.
    await chmod(dataRoot, 0o755);
  });

  afterAll(async () => {
    await running?.stop();
    process.env.TEMPORAL_ADDRESS = savedEnv.TEMPORAL_ADDRESS;
    process.env.DATABASE_URL = savedEnv.DATABASE_URL;
    if (savedEnv.TEMPORAL_ADDRESS === undefined) delete process.env.TEMPORAL_ADDRESS;
    if (savedEnv.DATABASE_URL === undefined) delete process.env.DATABASE_URL;
    if (dataRoot) await rm(dataRoot, { recursive: true, force: true });
  }, stackTimeoutMs);

  // A UI port picked ahead of time can be taken by a parallel test before the server binds it;
  // only the test that checks the UI asks for one.
  const start = async (options: { withUi?: boolean } = {}): Promise<LocalStack> => {
    running = await startChargeguardStack({
      dataDir: join(dataRoot, 'data'),
      temporalUiPort: options.withUi ? await findFreePort() : null,
      serverNiceness,
      log: (line) => lines.push(line),
    });
    return running;
  };

  const stop = async (stack: LocalStack): Promise<void> => {
    await stack.stop();
    running = null;
  };

  it(
    'serves PostgreSQL and Temporal, and frees every port on stop',
    async () => {
      const stack = await start({ withUi: true });
      expect(stack.temporalUiUrl).not.toBeNull();

      const one = await withPg(stack.migrationDatabaseUrl, async (client) => {
        await client.query('create table stack_survivor (note text primary key)');
        await client.query("insert into stack_survivor values ('written before restart')");
        // A backend forked after the start takes the postmaster's niceness.
        const backend = (await client.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
        expect(nicenessOfProcessTree(backend)).toEqual(new Set([serverNiceness]));
        return (await client.query<{ one: number }>('select 1 as one')).rows[0]?.one;
      });
      expect(one).toBe(1);
      // Each server and all it forked run at serverNiceness (src/stack/server-niceness.ts).
      const postmaster = Number((await readFile(join(dataRoot, 'data', 'postgres', 'postmaster.pid'), 'utf8')).split('\n')[0]);
      const devServer = (JSON.parse(await readFile(join(dataRoot, 'data', 'temporal.sqlite.server.json'), 'utf8')) as { serverPid: number }).serverPid;
      expect(nicenessOfProcessTree(postmaster), 'postgres').toEqual(new Set([serverNiceness]));
      expect(nicenessOfProcessTree(devServer), 'temporal').toEqual(new Set([serverNiceness]));
      // Each leads a session of its own, and so a scheduler autogroup of its own where the kernel
      // keeps them: the group's niceness is what weighs it against the API's.
      for (const [name, pid] of [['postgres', postmaster], ['temporal', devServer]] as const) {
        const autogroup = await readFile(`/proc/${pid}/autogroup`, 'utf8').catch(() => null);
        if (autogroup !== null) expect(autogroup, name).toMatch(new RegExp(`nice ${serverNiceness}\\b`));
      }
      expect(lines.some((line) => line.startsWith(`postgres: niceness ${serverNiceness} on `))).toBe(true);
      expect(lines.some((line) => line.startsWith(`temporal: niceness ${serverNiceness} on `))).toBe(true);

      await withTemporal(stack.temporalAddress, async (connection) => {
        const info = await connection.workflowService.getSystemInfo({});
        expect(info.serverVersion).toMatch(/^1\./);
        const attributes = await connection.operatorService.listSearchAttributes({ namespace: 'default' });
        expect(Object.keys(attributes.customAttributes ?? {})).toEqual(
          expect.arrayContaining(['ChargeTenant', 'ChargeOrderId', 'ChargePayerAccountId', 'ChargeAmountMinor', 'ChargeCurrency', 'ChargeCaptureMode', 'ChargeStatus']),
        );
        // No worker is needed to start a workflow; it proves Temporal state survives a restart.
        await new Client({ connection }).workflow.start('stackPersistenceProbe', {
          taskQueue: 'stack-test',
          workflowId: 'stack-persistence-probe',
        });
      });

      const ui = await fetch(stack.temporalUiUrl!);
      expect(ui.status).toBe(200);

      const endpoints = [hostPort(stack.temporalAddress), hostPort(stack.databaseUrl), hostPort(stack.temporalUiUrl!)];
      firstStart = { temporalAddress: stack.temporalAddress, databaseUrl: stack.databaseUrl, migrationDatabaseUrl: stack.migrationDatabaseUrl };
      await stop(stack);
      // stop() resolves only after both processes exited, so the ports must be closed right away.
      for (const { host, port } of endpoints) {
        expect(await probe(host, port), `${host}:${port}`).toBe('ECONNREFUSED');
      }
    },
    stackTimeoutMs,
  );

  it(
    'keeps PostgreSQL and Temporal data across a restart on the same data dir',
    async () => {
      const stack = await start();
      const notes = await withPg(stack.databaseUrl, async (client) => {
        return (await client.query<{ note: string }>('select note from stack_survivor')).rows.map((r) => r.note);
      });
      expect(notes).toEqual(['written before restart']);

      const status = await withTemporal(stack.temporalAddress, async (connection) => {
        const handle = new Client({ connection }).workflow.getHandle('stack-persistence-probe');
        return (await handle.describe()).status.name;
      });
      expect(status).toBe('RUNNING');
      // The same ports as the first start (remembered in the data dir): what other terminals exported still holds.
      expect({ temporalAddress: stack.temporalAddress, databaseUrl: stack.databaseUrl, migrationDatabaseUrl: stack.migrationDatabaseUrl }).toEqual(firstStart);

      await stop(stack);
      expect(lines.some((line) => line.startsWith('postgres: embedded server ready'))).toBe(true);
    },
    stackTimeoutMs,
  );

  it(
    'stops servers orphaned by a dead owner before starting on the same data dir',
    async () => {
      const orphaned = await start();
      const oldEndpoints = [hostPort(orphaned.temporalAddress), hostPort(orphaned.databaseUrl)];
      // Pretend the process that started them was SIGKILLed: its servers keep running, and the lock
      // files name an owner that no longer exists.
      const owner = await deadPid();
      for (const lockPath of [join(dataRoot, 'data', 'temporal.sqlite.server.json'), join(dataRoot, 'data', 'postgres.server.json')]) {
        const lock = JSON.parse(await readFile(lockPath, 'utf8')) as Record<string, unknown>;
        await writeFile(lockPath, JSON.stringify({ ...lock, ownerPid: owner, ownerStartTicks: null }));
      }

      const stack = await start();
      // The orphans were stopped before the ports were chosen: the new servers listen where they did.
      expect([hostPort(stack.temporalAddress), hostPort(stack.databaseUrl)]).toEqual(oldEndpoints);
      expect(lines.join('\n')).toMatch(/stopping orphaned server pid \d+ left by dead process/);
      const notes = await withPg(stack.databaseUrl, async (client) => (await client.query('select note from stack_survivor')).rowCount);
      expect(notes).toBe(1);
      await stop(stack);
      await orphaned.stop(); // already gone; must not hang or throw
    },
    stackTimeoutMs,
  );

  it('cluster shape with an external DATABASE_URL: refused naming it before any server starts', async () => {
    const dataDir = join(dataRoot, 'cluster-external');
    process.env.DATABASE_URL = 'postgres://someone@127.0.0.1:1/elsewhere';
    try {
      await expect(startChargeguardStack({ dataDir, temporalUiPort: null, temporal: 'cluster' })).rejects.toThrow(/DATABASE_URL names an external one/);
    } finally {
      delete process.env.DATABASE_URL;
    }
    // Nothing was started or written: not even the data dir (no PostgreSQL, no payload key).
    await expect(readdir(dataDir).catch((error: NodeJS.ErrnoException) => error.code)).resolves.toBe('ENOENT');
  });

  it(
    'refuses to start on a data dir that a live stack is using',
    async () => {
      const first = await start();
      await expect(startChargeguardStack({ dataDir: join(dataRoot, 'data'), temporalUiPort: null })).rejects.toThrow(/already in use by process/);
      // The failed second start must not have disturbed the first.
      expect(await withPg(first.databaseUrl, async (client) => (await client.query('select 1')).rowCount)).toBe(1);
      await stop(first);
    },
    stackTimeoutMs,
  );
});
