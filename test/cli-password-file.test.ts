import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { runCli } from './support/cli.js';

// `chargeguard start` prints DATABASE_URL without its password and PGPASSFILE naming the file that
// holds it; other terminals' commands connect that way.
let dir: string;
let passwordFile: string;
let urlWithoutPassword: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'chargeguard-pgpass-'));
  const url = new URL(inject('stack').databaseUrl);
  passwordFile = join(dir, 'pgpass');
  await writeFile(passwordFile, `${url.hostname}:*:*:${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}\n`, { mode: 0o600 });
  url.password = '';
  urlWithoutPassword = url.toString();
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('a password from PGPASSFILE', () => {
  // The URL carries no password, so connecting at all shows the password came from the file.
  it('connects without any deprecation warning, and --help prints none either', { timeout: 120_000 }, async () => {
    const listed = await runCli(['api-keys', 'list', '--tenant', 'pgpass-nobody', '--json'], { DATABASE_URL: urlWithoutPassword, PGPASSFILE: passwordFile });
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.json).toEqual([]);
    expect(listed.stderr).not.toMatch(/deprecat/i);

    const help = await runCli(['--help'], { PGPASSFILE: passwordFile });
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('Usage: chargeguard');
    expect(help.stderr).not.toMatch(/deprecat/i);
  });
});
