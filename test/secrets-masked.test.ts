import { spawn } from 'node:child_process';
import { chmod, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { connectionLines } from '../src/cli/commands/start.js';
import { maskDatabaseUrl } from '../src/runtime/dependency-wait.js';
import { findFreePort } from '../src/stack/free-port.js';
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

  it(
    '`chargeguard start` prints no password, its printed lines connect as the app role, and its logs hold no password either',
    { timeout: 400_000 },
    async () => {
      const dataDir = await mkdtemp(join(tmpdir(), 'chargeguard-secrets-'));
      // PostgreSQL runs as its own OS user when we are root; it must be able to enter this folder.
      await chmod(dataDir, 0o755);
      const env: NodeJS.ProcessEnv = { ...process.env, CHARGEGUARD_DATA_DIR: dataDir };
      delete env.TEMPORAL_ADDRESS;
      delete env.DATABASE_URL;
      delete env.MIGRATION_DATABASE_URL;
      const apiPort = await findFreePort();
      const uiPort = await findFreePort();
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
        const passFile = /export PGPASSFILE=(\S+)/.exec(output)?.[1];
        const appUrl = /export DATABASE_URL=(\S+)/.exec(output)?.[1];
        const ownerUrl = /export MIGRATION_DATABASE_URL=(\S+)/.exec(output)?.[1];
        expect(passFile, output).toBe(join(dataDir, 'postgres.pgpass'));
        expect(appUrl, output).toMatch(/^postgres:\/\/chargeguard_app@127\.0\.0\.1:\d+\/chargeguard$/);
        expect(ownerUrl, output).toMatch(/^postgres:\/\/chargeguard_owner@127\.0\.0\.1:\d+\/chargeguard$/);

        const passwords = (await readFile(passFile!, 'utf8'))
          .trim()
          .split('\n')
          .map((line) => line.split(':').at(-1)!);
        expect(passwords).toHaveLength(2);
        for (const secret of passwords) expect(secret).toMatch(/^[0-9a-f]{48}$/);
        const logsDir = join(dataDir, 'logs');
        const logs = await Promise.all((await readdir(logsDir)).map((file) => readFile(join(logsDir, file), 'utf8')));
        for (const secret of [...passwords, 'postgres:postgres@']) {
          expect(output).not.toContain(secret);
          for (const log of logs) expect(log).not.toContain(secret);
        }

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
        child.kill('SIGTERM');
        expect(await exited).toBe(0);
      } finally {
        if (child.exitCode === null) child.kill('SIGKILL');
        await exited;
        await rm(dataDir, { recursive: true, force: true });
      }
    },
  );
});
