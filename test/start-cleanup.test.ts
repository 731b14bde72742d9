import { spawn, type ChildProcess } from 'node:child_process';
import { access, chmod, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { isRoot } from '../src/stack/postgres-user.js';
import { findFreePort } from '../src/support/free-port.js';
import { isMissingFile } from '../src/support/files.js';
import { isPortAccepting } from '../src/support/wait.js';
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

  it(
    'a Ctrl-C (SIGINT to the whole process group, as a terminal sends it) stops quietly, and a restart on the same data dir, made by mktemp (0700), prints the same exports',
    { timeout: 600_000 },
    async () => {
      // Not loosened: `mktemp -d` as a newcomer would make it. As root, PostgreSQL's OS user is let through.
      const dataDir = await mkdtemp(join(tmpdir(), 'chargeguard-start-'));
      try {
        const first = await startCommand(dataDir);
        const firstExports = exportLines(first.output());
        expect(firstExports.map((line) => line.trim().split('=')[0])).toEqual(
          expect.arrayContaining(['export TEMPORAL_ADDRESS', 'export DATABASE_URL', 'export MIGRATION_DATABASE_URL', 'export PGPASSFILE', 'export CHARGEGUARD_PAYLOAD_KEYS_FILE']),
        );
        if (isRoot()) {
          // Let through for PostgreSQL's OS user alone: group postgres, search bit only, nothing for others.
          expect((await stat(dataDir)).mode & 0o777).toBe(0o710);
          expect(first.output()).toMatch(/let PostgreSQL's OS user 'postgres' through/);
        }
        await first.interruptGroup();
        expect(await first.exited).toBe(0);
        expectQuietStop(first.output());

        const second = await startCommand(dataDir);
        // The printed exports still hold: the same Temporal and PostgreSQL ports (remembered in ports.json).
        expect(exportLines(second.output())).toEqual(firstExports);
        const remembered = JSON.parse(await readFile(join(dataDir, 'ports.json'), 'utf8')) as Record<string, number>;
        expect(firstExports).toContain(`  export TEMPORAL_ADDRESS=127.0.0.1:${remembered.temporal}`);
        expect(firstExports.some((line) => line.includes(`@127.0.0.1:${remembered.postgres}/`))).toBe(true);
        await second.interruptGroup();
        expect(await second.exited).toBe(0);
        expectQuietStop(second.output());
      } finally {
        await rm(dataDir, { recursive: true, force: true });
      }
    },
  );

  it('a start that fails exits non-zero: an unusable data dir at once, an API port in use after stopping what it had started', { timeout: 400_000 }, async () => {
    const scratch = await mkdtemp(join(tmpdir(), 'chargeguard-start-'));
    await chmod(scratch, 0o755);
    const occupied = await listenAnywhere();
    try {
      // A data dir that is a file: nothing can start.
      const notADir = join(scratch, 'not-a-dir');
      await writeFile(notADir, 'a file, not a folder\n');
      const refused = await startCommand(notADir, { expectRunning: false });
      expect(await refused.exited, refused.output()).not.toBe(0);
      expect(refused.output()).toMatch(/error: .*not-a-dir/);

      // The API's port is taken: Temporal and PostgreSQL started, then stopped again, and the exit says so.
      const dataDir = join(scratch, 'data');
      const apiPortTaken = await startCommand(dataDir, { expectRunning: false, apiPort: occupied.port });
      expect(await apiPortTaken.exited, apiPortTaken.output()).toBe(1);
      expect(apiPortTaken.output()).toMatch(/EADDRINUSE.*:\d+/);
      expect(apiPortTaken.output()).not.toContain('chargeguard is running');
      expect(apiPortTaken.output()).toMatch(/postgres: embedded server stopped/);
      expect(apiPortTaken.output()).toMatch(/temporal: dev server stopped/);
      expect(await exists(join(dataDir, 'temporal.sqlite.server.json'))).toBe(false);
      expect(await exists(join(dataDir, 'postgres.server.json'))).toBe(false);
      const remembered = JSON.parse(await readFile(join(dataDir, 'ports.json'), 'utf8')) as Record<string, number>;
      expect(await isPortAccepting(remembered.temporal!)).toBe(false);
      expect(await isPortAccepting(remembered.postgres!)).toBe(false);
    } finally {
      await new Promise((resolve) => occupied.server.close(resolve));
      await rm(scratch, { recursive: true, force: true });
    }
  });
});

/** What a normal stop must not print: a connection ended under the pool, or PostgreSQL's own words for it. */
function expectQuietStop(output: string): void {
  const afterStop = output.slice(output.indexOf('stopping ('));
  expect(afterStop).toMatch(/^stopping \(received SIGINT\)/);
  expect(afterStop).not.toMatch(/connection in use failed|idle connection failed|terminating connection|error/i);
  expect(afterStop).toMatch(/local stack stopped/);
}

/** A stop for every command a test started: a failed assertion must not leave servers running. */
const commandsStarted: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  await Promise.all(commandsStarted.splice(0).map((stop) => stop()));
}, 120_000);

function exportLines(output: string): string[] {
  return output.split('\n').filter((line) => line.startsWith('  export '));
}

async function listenAnywhere(): Promise<{ server: Server; port: number }> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen({ host: '127.0.0.1', port: 0 }, resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  return { server, port: address.port };
}

interface StartedCommand {
  child: ChildProcess;
  exited: Promise<number | null>;
  output(): string;
  /** SIGINT to the command's whole process group, as a terminal's Ctrl-C. */
  interruptGroup(): Promise<void>;
}

/**
 * `chargeguard start` in a process group of its own (so a signal to the group is a terminal's
 * Ctrl-C), on free API and UI ports; waits until it is running unless told it should not get there.
 */
async function startCommand(dataDir: string, options: { expectRunning?: boolean; apiPort?: number } = {}): Promise<StartedCommand> {
  const apiPort = options.apiPort ?? (await findFreePort());
  const uiPort = await findFreePort();
  const env: NodeJS.ProcessEnv = { ...process.env, CHARGEGUARD_DATA_DIR: dataDir };
  delete env.TEMPORAL_ADDRESS;
  delete env.DATABASE_URL;
  delete env.MIGRATION_DATABASE_URL;
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'start', '--port', String(apiPort), '--ui-port', String(uiPort)], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const stopOnTestEnd = (): Promise<unknown> => {
    if (child.exitCode !== null || child.signalCode !== null) return exited;
    // SIGTERM, not SIGKILL: its servers are in process groups of their own and only it stops them.
    process.kill(-child.pid!, 'SIGTERM');
    return exited;
  };
  commandsStarted.push(stopOnTestEnd);
  const started: StartedCommand = {
    child,
    exited,
    output: () => output,
    interruptGroup: async () => {
      process.kill(-child.pid!, 'SIGINT');
    },
  };
  if (options.expectRunning === false) {
    // Bounded: a start that should fail and hangs instead is a failure of its own.
    const timeout = setTimeout(() => void stopOnTestEnd(), 300_000);
    void exited.then(() => clearTimeout(timeout));
    return started;
  }
  try {
    await waitFor(
      async () => {
        if (child.exitCode !== null) throw new Error(`start exited (${child.exitCode}):\n${output}`);
        return output.includes('Ctrl-C stops everything.');
      },
      { timeoutMs: 300_000, intervalMs: 200, what: 'start to be running' },
    );
  } catch (error) {
    await stopOnTestEnd();
    throw error;
  }
  return started;
}

