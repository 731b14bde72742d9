import { spawn, type ChildProcess } from 'node:child_process';
import { chmod, mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { connectionLines } from '../src/cli/commands/start.js';
import { maskDatabaseUrl } from '../src/support/dependency-wait.js';
import { findFreePort } from '../src/support/free-port.js';
import { maskToken, maskUrlPassword, withoutUrlPassword } from '../src/support/redact.js';
import { waitFor } from './support/harness.js';

const password = 'S3cret-pw_that-must-not-show';

describe('URLs and keys are masked wherever they are printed', () => {
  it('masks a password in the user part and in query parameters; prints nothing of what does not parse', () => {
    expect(maskUrlPassword(`postgres://app:${password}@db.internal:5432/chargeguard`)).toBe('postgres://app:***@db.internal:5432/chargeguard');
    expect(maskUrlPassword(`postgres://db/chargeguard?user=app&password=${password}&sslmode=require`)).toBe(
      'postgres://db/chargeguard?user=app&password=***&sslmode=require',
    );
    expect(maskUrlPassword(`not a url ${password}`, 'DATABASE_URL')).toBe('(unparseable DATABASE_URL)');
    expect(withoutUrlPassword(`postgres://app:${password}@127.0.0.1:5432/chargeguard`)).toBe('postgres://app@127.0.0.1:5432/chargeguard');
    expect(maskDatabaseUrl(`postgres://app:${encodeURIComponent(password)}@h/db`)).toBe('postgres://app:***@h/db');
    expect(maskToken(password)).toBe(`*** (${password.length} chars)`);
    expect(maskToken(undefined)).toBe('(not set)');
  });

  it("start's lines for an external DATABASE_URL show user, host and database with the passwords masked", () => {
    const lines = connectionLines({
      temporalAddress: 'temporal:7233',
      databaseUrl: `postgres://chargeguard_app:${password}@db:5432/chargeguard`,
      migrationDatabaseUrl: `postgres://chargeguard_owner:${password}x@db:5432/chargeguard`,
      passwordFilePath: null,
    }).join('\n');
    expect(lines).not.toContain(password);
    expect(lines).toContain('export DATABASE_URL=postgres://chargeguard_app:***@db:5432/chargeguard');
    expect(lines).toContain('export MIGRATION_DATABASE_URL=postgres://chargeguard_owner:***@db:5432/chargeguard');
  });

  it("start's lines name the payload key file or settings, never the keys", () => {
    const stack = { temporalAddress: 't:7233', databaseUrl: 'postgres://a@h/db', migrationDatabaseUrl: 'postgres://o@h/db', passwordFilePath: '/d/postgres.pgpass' };
    const key = `k1:${Buffer.alloc(32, 7).toString('base64')}`;
    expect(connectionLines(stack, { CHARGEGUARD_PAYLOAD_KEYS_FILE: '/d/payload-keys' })).toContain('  export CHARGEGUARD_PAYLOAD_KEYS_FILE=/d/payload-keys');
    const inline = connectionLines(stack, { CHARGEGUARD_PAYLOAD_KEYS: key, CHARGEGUARD_PAYLOAD_PLAINTEXT: 'accept' }).join('\n');
    expect(inline).not.toContain(key.slice(3));
    expect(inline).toContain('export CHARGEGUARD_PAYLOAD_KEYS=<the keys you set>');
    expect(inline).toContain('export CHARGEGUARD_PAYLOAD_PLAINTEXT=accept');
  });

  it(
    '`chargeguard start` prints no password and no key, its printed lines connect as the app role and start a second API with the same key, its logs hold neither, and a restart keeps the key',
    { timeout: 400_000 },
    async () => {
      const dataDir = await mkdtemp(join(tmpdir(), 'chargeguard-secrets-'));
      // PostgreSQL runs as its own OS user when we are root; it must be able to enter this folder.
      await chmod(dataDir, 0o755);
      const env: NodeJS.ProcessEnv = { ...process.env, CHARGEGUARD_DATA_DIR: dataDir };
      for (const name of ['TEMPORAL_ADDRESS', 'DATABASE_URL', 'MIGRATION_DATABASE_URL', 'CHARGEGUARD_PAYLOAD_KEYS', 'CHARGEGUARD_PAYLOAD_KEYS_FILE', 'CHARGEGUARD_PAYLOAD_PLAINTEXT']) {
        delete env[name];
      }
      const apiPort = await findFreePort();
      const uiPort = await findFreePort();
      const started: Array<{ child: ChildProcess; exited: Promise<number | null> }> = [];
      /** A child process, its stdout and stderr collected together; killed at the end if still running. */
      const run = (args: string[], childEnv: NodeJS.ProcessEnv) => {
        const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', ...args], { env: childEnv, stdio: ['ignore', 'pipe', 'pipe'] });
        let text = '';
        child.stdout!.on('data', (chunk: Buffer) => (text += chunk.toString()));
        child.stderr!.on('data', (chunk: Buffer) => (text += chunk.toString()));
        const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
        started.push({ child, exited });
        const until = (pattern: RegExp, what: string) =>
          waitFor(
            async () => {
              if (child.exitCode !== null) throw new Error(`${what}: the process exited (${child.exitCode}):\n${text}`);
              return pattern.test(text);
            },
            { timeoutMs: 300_000, intervalMs: 200, what },
          );
        return { child, exited, output: () => text, until };
      };
      const startArgs = ['start', '--port', String(apiPort), '--ui-port', String(uiPort)];
      try {
        const first = run(startArgs, env);
        await first.until(/chargeguard is running/, 'start to be running');
        const output = first.output();
        const passFile = /export PGPASSFILE=(\S+)/.exec(output)?.[1];
        const appUrl = /export DATABASE_URL=(\S+)/.exec(output)?.[1];
        const ownerUrl = /export MIGRATION_DATABASE_URL=(\S+)/.exec(output)?.[1];
        const temporalAddress = /export TEMPORAL_ADDRESS=(\S+)/.exec(output)?.[1];
        const keyFile = /export CHARGEGUARD_PAYLOAD_KEYS_FILE=(\S+)/.exec(output)?.[1];
        expect(passFile, output).toBe(join(dataDir, 'postgres.pgpass'));
        expect(appUrl, output).toMatch(/^postgres:\/\/chargeguard_app@127\.0\.0\.1:\d+\/chargeguard$/);
        expect(ownerUrl, output).toMatch(/^postgres:\/\/chargeguard_owner@127\.0\.0\.1:\d+\/chargeguard$/);
        // The payload key, generated on this first start, in the data dir, for its owner only.
        expect(keyFile, output).toBe(join(dataDir, 'payload-keys'));
        expect((await stat(keyFile!)).mode & 0o777).toBe(0o600);
        const keyFileText = await readFile(keyFile!, 'utf8');
        const keyLines = keyFileText.split('\n').filter((line) => line !== '' && !line.startsWith('#'));
        expect(keyLines).toHaveLength(1);
        const [keyId, keyMaterial] = keyLines[0]!.split(':') as [string, string];
        expect(keyId).toMatch(/^local-[0-9a-f]{8}$/);
        expect(Buffer.from(keyMaterial, 'base64')).toHaveLength(32);

        const passwords = (await readFile(passFile!, 'utf8'))
          .trim()
          .split('\n')
          .map((line) => line.split(':').at(-1)!);
        expect(passwords).toHaveLength(2);
        for (const secret of passwords) expect(secret).toMatch(/^[0-9a-f]{48}$/);

        // The lines work as printed: the client finds the password through PGPASSFILE.
        const savedPassFile = process.env.PGPASSFILE;
        process.env.PGPASSFILE = passFile;
        try {
          const client = new pg.Client({ connectionString: appUrl });
          await client.connect();
          try {
            const { rows } = await client.query<{ user: string }>('SELECT current_user AS user');
            expect(rows[0]!.user).toBe('chargeguard_app');
          } finally {
            await client.end();
          }
        } finally {
          if (savedPassFile === undefined) delete process.env.PGPASSFILE;
          else process.env.PGPASSFILE = savedPassFile;
        }

        // A second API started with exactly the printed lines finds the same key and agrees with start's worker.
        const printed = { TEMPORAL_ADDRESS: temporalAddress, PGPASSFILE: passFile, DATABASE_URL: appUrl, MIGRATION_DATABASE_URL: ownerUrl, CHARGEGUARD_PAYLOAD_KEYS_FILE: keyFile };
        const secondApi = run(['api', '--port', String(await findFreePort()), '--log-level', 'warn'], { ...env, ...printed });
        await secondApi.until(/API listening on/, 'the second API to listen');
        expect(secondApi.output()).toContain(`keys ${keyId} (${keyId} encrypts)`);
        expect(secondApi.output()).toMatch(/payload key check: keys match the 1 worker\(s\) polling task queue "charges"/);
        // Without the key file line, the same API refuses to start and says what it needs.
        const withoutKeys = run(['api', '--port', String(await findFreePort())], { ...env, ...printed, CHARGEGUARD_PAYLOAD_KEYS_FILE: '' });
        expect(await withoutKeys.exited).not.toBe(0);
        expect(withoutKeys.output()).toMatch(/CHARGEGUARD_PAYLOAD_KEYS_FILE/);
        expect(withoutKeys.output()).toMatch(/CHARGEGUARD_PAYLOAD_PLAINTEXT=accept/);
        secondApi.child.kill('SIGTERM');
        expect(await secondApi.exited).toBe(0);

        first.child.kill('SIGTERM');
        expect(await first.exited).toBe(0);

        // A restart on the same data dir keeps the key: the open charges stay readable.
        const second = run(startArgs, env);
        await second.until(/chargeguard is running/, 'start to be running again');
        expect(await readFile(keyFile!, 'utf8')).toBe(keyFileText);
        expect((await stat(keyFile!)).mode & 0o777).toBe(0o600);
        expect(second.output()).toContain(`payload keys: using ${keyFile}`);
        second.child.kill('SIGTERM');
        expect(await second.exited).toBe(0);

        const logsDir = join(dataDir, 'logs');
        const logs = await Promise.all((await readdir(logsDir)).map((file) => readFile(join(logsDir, file), 'utf8')));
        for (const secret of [...passwords, 'postgres:postgres@', keyMaterial]) {
          for (const { output: text } of [first, secondApi, withoutKeys, second]) expect(text()).not.toContain(secret);
          for (const log of logs) expect(log).not.toContain(secret);
        }
      } finally {
        for (const { child, exited } of started) {
          if (child.exitCode === null) child.kill('SIGKILL');
          await exited;
        }
        await rm(dataDir, { recursive: true, force: true });
      }
    },
  );
});
