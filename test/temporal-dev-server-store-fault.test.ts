import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { describe, expect, it } from 'vitest';
import { SqliteStoreFaultDetector } from '../src/stack/sqlite-store-fault.js';
import { resolveTemporalCliPath } from '../src/stack/temporal-cli.js';
import { startTemporalDevServer } from '../src/stack/temporal-dev-server.js';
import { waitFor } from './support/harness.js';

const faultLine = '{"level":"error","msg":"Operation failed with internal error.","error":"GetCurrentExecution operation failed. Error: interrupted (9)"}';

describe('a dev server whose SQLite store fails', () => {
  it('a burst of "interrupted (9)" within the window is the fault; the same lines spread out, or other errors, are not', () => {
    const limits = { faultLines: 5, windowMs: 1_000, maxRestarts: 1 };
    const burst = new SqliteStoreFaultDetector(limits);
    expect([0, 1, 2, 3].map((ms) => burst.see(faultLine, ms))).toEqual([false, false, false, false]);
    expect(burst.see('{"level":"error","error":"context deadline exceeded"}', 4)).toBe(false);
    expect(burst.see(faultLine, 5)).toBe(true);

    const spread = new SqliteStoreFaultDetector(limits);
    expect(Array.from({ length: 20 }, (_, i) => spread.see(faultLine, i * 300)).some(Boolean)).toBe(false);

    burst.reset();
    expect(burst.see(faultLine, 6)).toBe(false);
    expect(() => new SqliteStoreFaultDetector({ faultLines: 0, windowMs: 1_000, maxRestarts: 1 })).toThrow(/positive/);
  });

  it('is restarted on the same address and file when its output shows the fault; what it held is still there; past maxRestarts it is left and said', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'chargeguard-store-fault-'));
    // The real CLI behind a wrapper that, on SIGUSR1, writes the fault's lines as the failing server does.
    const wrapper = join(dir, 'temporal');
    await writeFile(
      wrapper,
      [
        '#!/usr/bin/env bash',
        `"${resolveTemporalCliPath()}" "$@" &`,
        'server=$!',
        "trap 'kill -TERM $server; wait $server; exit 0' TERM",
        `trap 'for i in $(seq 1 60); do echo '"'"'${faultLine}'"'"' >&2; done' USR1`,
        'while kill -0 $server 2>/dev/null; do wait $server; done',
        '',
      ].join('\n'),
    );
    await chmod(wrapper, 0o755);
    const dbFilePath = join(dir, 'temporal.sqlite');
    const said: string[] = [];
    const server = await startTemporalDevServer({
      dbFilePath,
      uiPort: null,
      searchAttributes: {},
      cliPath: wrapper,
      logFilePath: join(dir, 'temporal.log'),
      storeFaultLimits: { faultLines: 50, windowMs: 10_000, maxRestarts: 1 },
      log: (line) => said.push(line),
    });
    const wrapperPid = async (): Promise<number> => (JSON.parse(await readFile(`${dbFilePath}.server.json`, 'utf8')) as { serverPid: number }).serverPid;
    try {
      const connection = await Connection.connect({ address: server.address });
      try {
        const client = new Client({ connection });
        // A workflow no worker runs: it stays open, in the SQLite file.
        const handle = await client.workflow.start('nothing', { taskQueue: 'nobody', workflowId: 'held-across-a-restart' });
        const firstPid = await wrapperPid();

        process.kill(firstPid, 'SIGUSR1');
        await waitFor(async () => said.some((line) => /dev server restarted on/.test(line)), { timeoutMs: 60_000, what: 'the store restart' });
        expect(said[0]).toMatch(/SQLite store is failing every operation .*restart 1 of at most 1/);
        expect(server.storeRestarts()).toBe(1);
        const secondPid = await wrapperPid();
        expect(secondPid).not.toBe(firstPid);
        expect((await handle.describe()).status.name).toBe('RUNNING');

        // Past the limit: said once, the server left running as it is.
        process.kill(secondPid, 'SIGUSR1');
        await waitFor(async () => said.some((line) => /not restarting it any more/.test(line)), { timeoutMs: 30_000, what: 'the give-up line' });
        expect(server.storeRestarts()).toBe(1);
        expect(await wrapperPid()).toBe(secondPid);
      } finally {
        await connection.close();
      }
    } finally {
      await server.stop();
      await rm(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
