import { execFile, spawn } from 'node:child_process';
import { access, chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { clusterApiPorts, parseCount } from '../../src/cli/commands/start-cluster.js';
import { findFreePorts } from '../../src/stack/free-port.js';
import { isPortAccepting } from '../../src/stack/wait.js';
import { isMissingFile } from '../../src/support/files.js';
import { waitFor } from '../support/harness.js';
import { isProcessAlive } from '../../src/stack/child-process.js';

const run = promisify(execFile);

async function exists(path: string): Promise<boolean> {
  return access(path).then(
    () => true,
    (error: unknown) => {
      if (isMissingFile(error)) return false;
      throw error;
    },
  );
}


/** The environment of a `start` with embedded servers of its own, not the test run's. */
function ownServersEnv(dataDir: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, CHARGEGUARD_DATA_DIR: dataDir };
  delete env.TEMPORAL_ADDRESS;
  delete env.DATABASE_URL;
  delete env.MIGRATION_DATABASE_URL;
  return env;
}

describe('`chargeguard start --cluster`', () => {
  it('reads its process counts and API ports strictly', () => {
    expect(clusterApiPorts({ port: '3000', apis: '2' })).toEqual([3000, 3001]);
    expect(clusterApiPorts({ port: '0', apis: '3' })).toEqual([0, 0, 0]);
    expect(clusterApiPorts({ port: '3000', apis: '2', apiPorts: '4000, 4100,0' })).toEqual([4000, 4100, 0]);
    expect(parseCount('8', '--workers')).toBe(8);
    for (const [bad, message] of [
      [() => parseCount('9', '--workers'), '--workers must be a whole number from 1 to 8, got "9"'],
      [() => parseCount('1.5', '--workers'), '--workers must be a whole number from 1 to 8, got "1.5"'],
      [() => clusterApiPorts({ port: '3000', apis: '0' }), '--apis must be a whole number from 1 to 8, got "0"'],
      [() => clusterApiPorts({ port: '3000', apis: '2', apiPorts: '3000,3000' }), '--api-ports: 3000,3000 names a port twice'],
      [() => clusterApiPorts({ port: '3000', apis: '2', apiPorts: '3000,http' }), '--api-ports: "http" is not a port (0-65535)'],
      [() => clusterApiPorts({ port: '3000', apis: '2', apiPorts: Array.from({ length: 9 }, (_, i) => 4000 + i).join(',') }), '--api-ports: at most 8 API processes, got 9'],
      [() => clusterApiPorts({ port: '65535', apis: '2' }), '--port 65535 with --apis 2 runs past port 65535'],
      [() => clusterApiPorts({ port: '-1', apis: '2' }), '--port: "-1" is not a port (0-65535)'],
    ] as const) {
      expect(bad).toThrow(message);
    }
  });

  it('refuses a bad flag before starting anything', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'chargeguard-start-cluster-flags-'));
    try {
      const failed = await run(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'start', '--cluster', '--workers', '9'], {
        env: ownServersEnv(dataDir),
        timeout: 60_000,
      }).then(
        () => null,
        (error: { code?: number; stderr?: string }) => error,
      );
      expect(failed).not.toBeNull();
      expect(failed!.code).toBe(1);
      expect(failed!.stderr).toContain('--workers must be a whole number from 1 to 8, got "9"');
      // Nothing was started: no PostgreSQL cluster, no Temporal config.
      expect(await exists(join(dataDir, 'postgres'))).toBe(false);
      expect(await exists(join(dataDir, 'temporal-cluster'))).toBe(false);
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });

  it('runs 2 worker and 2 API processes over its own Temporal server, and on SIGTERM stops every one of them', { timeout: 400_000 }, async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'chargeguard-start-cluster-'));
    // PostgreSQL runs as its own OS user when we are root; it must be able to enter this folder.
    await chmod(dataDir, 0o755);
    const apiPorts = await findFreePorts(2);
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'start', '--cluster', '--api-ports', apiPorts.join(',')], {
      env: ownServersEnv(dataDir),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      await waitFor(
        async () => {
          if (child.exitCode !== null) throw new Error(`start --cluster exited (${child.exitCode}):\n${output}`);
          return output.includes('Ctrl-C stops everything.');
        },
        { timeoutMs: 300_000, intervalMs: 200, what: 'start --cluster to be running' },
      );
      const workerPids = [...output.matchAll(/worker-\d+ \(pid (\d+)\)/g)].map((m) => Number(m[1]));
      const apiPids = [...output.matchAll(/\(api-\d+, pid (\d+);/g)].map((m) => Number(m[1]));
      expect(workerPids, output).toHaveLength(2);
      expect(apiPids, output).toHaveLength(2);
      for (const pid of [...workerPids, ...apiPids]) expect(isProcessAlive(pid)).toBe(true);
      const temporalAddress = /export TEMPORAL_ADDRESS=(\S+)/.exec(output)?.[1];
      const databasePort = /export DATABASE_URL=postgres:\/\/[^@]+@127\.0\.0\.1:(\d+)\//.exec(output)?.[1];
      expect(temporalAddress, output).toBeDefined();
      expect(databasePort, output).toBeDefined();
      for (const port of apiPorts) {
        expect(output).toContain(`http://127.0.0.1:${port}`);
        // Ready: this API process reaches Temporal and PostgreSQL.
        expect((await fetch(`http://127.0.0.1:${port}/readyz`)).status).toBe(200);
      }

      child.kill('SIGTERM');
      expect(await exited).toBe(0);
      expect(output).toMatch(/stopping \(received SIGTERM\)/);
      for (const pid of [...workerPids, ...apiPids]) expect(isProcessAlive(pid), `pid ${pid}`).toBe(false);
      // The orderly stop removes the servers' lock files and closes every port.
      expect(await exists(join(dataDir, 'temporal-cluster', 'server.json'))).toBe(false);
      expect(await exists(join(dataDir, 'postgres.server.json'))).toBe(false);
      expect(await isPortAccepting(Number(temporalAddress!.split(':')[1]))).toBe(false);
      expect(await isPortAccepting(Number(databasePort))).toBe(false);
      for (const port of apiPorts) expect(await isPortAccepting(port)).toBe(false);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
      await exited;
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});
