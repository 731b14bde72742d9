import { describe, expect, inject, it } from 'vitest';
import { runCli } from './support/cli.js';

/** `chargeguard migrate`: the one-shot job of a deployment (docker-compose.yml, ledger-migrate). */
describe('chargeguard migrate', () => {
  it('migrates as the schema owner, says so without the password, and is a no-op the second time', async () => {
    const stack = inject('stack');
    const password = new URL(stack.migrationDatabaseUrl).password;
    for (let run = 0; run < 2; run += 1) {
      const result = await runCli(['migrate'], { MIGRATION_DATABASE_URL: stack.migrationDatabaseUrl });
      expect(result.code, result.stderr).toBe(0);
      expect(result.stderr).toMatch(/ledger migrated/);
      if (password !== '') expect(result.stderr).not.toContain(password);
    }
  });

  it('as the app role alone it only checks that every migration is applied, and succeeds on a migrated ledger', async () => {
    const result = await runCli(['migrate'], { MIGRATION_DATABASE_URL: undefined });
    expect(result.code, result.stderr).toBe(0);
  });

  it('without any database URL it refuses, naming the variables', async () => {
    const result = await runCli(['migrate'], { MIGRATION_DATABASE_URL: undefined, DATABASE_URL: '' });
    expect(result.code).not.toBe(0);
    expect(result.stderr).toMatch(/MIGRATION_DATABASE_URL/);
  });
});
