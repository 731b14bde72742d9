import { spawn } from 'node:child_process';
import { access, chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { findFreePort } from '../src/stack/free-port.js';
import { isMissingFile } from '../src/support/files.js';
import { isPortAccepting } from '../src/stack/wait.js';
import { waitFor } from './support/harness.js';

async function exists(path: string): Promise<boolean> {
  return access(path).then(
    () => true,
    (error: unknown) => {
      if (isMissingFile(error)) return false;
      throw error;
    },
  );
}

describe('`chargeguard start`', () => {
  it('serves with its logger on, and on SIGTERM stops the worker, Temporal and PostgreSQL before exiting', { timeout: 400_000 }, async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'chargeguard-start-'));
    // PostgreSQL runs as its own OS user when we are root; it must be able to enter this folder.
    await chmod(dataDir, 0o755);
    const apiPort = await findFreePort();
    const uiPort = await findFreePort();
    const env: NodeJS.ProcessEnv = { ...process.env, CHARGEGUARD_DATA_DIR: dataDir };
    // Embedded servers of its own, not the test run's.
    delete env.TEMPORAL_ADDRESS;
    delete env.DATABASE_URL;
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'start', '--port', String(apiPort), '--ui-port', String(uiPort)], {
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      await waitFor(
        async () => {
          if (child.exitCode !== null) throw new Error(`start exited (${child.exitCode}):\n${output}`);
          return output.includes('chargeguard is running');
        },
        { timeoutMs: 300_000, intervalMs: 200, what: 'start to be running' },
      );
      // docs/api.md shows the banner and tells the reader how many lines to export: both as printed.
      const exported = (text: string) => [...text.matchAll(/^ {2}export (\w+)=/gm)].map((match) => match[1]);
      const page = await readFile('docs/api.md', 'utf8');
      const documentedBanner = /```text\n(chargeguard is running[\s\S]*?)```/.exec(page)?.[1] ?? '';
      expect(exported(documentedBanner)).toEqual(exported(output));
      const counted = /export the (\w+) lines as printed/.exec(page)?.[1];
      expect(['one', 'two', 'three', 'four', 'five', 'six', 'seven'].indexOf(counted ?? '') + 1, `"export the ${counted} lines"`).toBe(exported(output).length);

      const temporalAddress = /export TEMPORAL_ADDRESS=(\S+)/.exec(output)?.[1];
      const databasePort = /export DATABASE_URL=postgres:\/\/[^@]+@127\.0\.0\.1:(\d+)\//.exec(output)?.[1];
      expect(temporalAddress, output).toBeDefined();
      expect(databasePort, output).toBeDefined();

      const health = await fetch(`http://127.0.0.1:${apiPort}/healthz`);
      expect(health.status).toBe(200);
      expect(health.headers.get('x-request-id')).toMatch(/^req_/);
      // The API's logger is on under start (it used to be off, so its 5xx went unlogged).
      expect(output).toMatch(/"msg":"Server listening at http:\/\/127\.0\.0\.1:\d+"/);

      child.kill('SIGTERM');
      expect(await exited).toBe(0);
      expect(output).toMatch(/stopping \(received SIGTERM\)/);
      // The orderly stop removes the servers' lock files; a process that died without cleaning up leaves them.
      expect(await exists(join(dataDir, 'temporal.sqlite.server.json'))).toBe(false);
      expect(await exists(join(dataDir, 'postgres.server.json'))).toBe(false);
      expect(await isPortAccepting(Number(temporalAddress!.split(':')[1]))).toBe(false);
      expect(await isPortAccepting(Number(databasePort))).toBe(false);
      expect(await isPortAccepting(apiPort)).toBe(false);
      // The Web UI start runs (its UI server) is stopped with the rest.
      expect(await isPortAccepting(uiPort)).toBe(false);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
      await exited;
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});
