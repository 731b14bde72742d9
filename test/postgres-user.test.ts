import { chmod, mkdir, mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ensurePostgresOsUser, isRoot, prepareParentDirsFor, type OsUserIds } from '../src/stack/postgres-user.js';

/**
 * As root, PostgreSQL runs as its own OS user, which must pass through every folder above its data
 * dir. CI and the development machines run as root; as another user PostgreSQL runs as that user
 * and nothing is changed (the last test).
 */
describe('PostgreSQL\'s OS user and the data dir', () => {
  let scratch: string;
  const lines: string[] = [];
  beforeEach(async () => {
    scratch = await mkdtemp(join(tmpdir(), 'chargeguard-pguser-'));
    lines.length = 0;
  });
  afterEach(async () => {
    await rm(scratch, { recursive: true, force: true });
  });

  const postgresUser = async (): Promise<OsUserIds | null> => (isRoot() ? ensurePostgresOsUser(() => undefined) : null);

  it('a data dir made by mktemp (0700, root\'s): its group becomes postgres\'s with the search bit only (0710), said in the log', async () => {
    await chmod(scratch, 0o755);
    const dataDir = join(scratch, 'mktemp-made');
    await mkdir(dataDir, { mode: 0o700 });
    await chmod(dataDir, 0o700);
    const user = await postgresUser();
    await prepareParentDirsFor(join(dataDir, 'postgres'), user, { grantTraverseOn: dataDir, log: (line) => lines.push(line) });
    const after = await stat(dataDir);
    if (user === null) {
      expect(after.mode & 0o777).toBe(0o700);
      expect(lines).toEqual([]);
      return;
    }
    expect(after.mode & 0o777).toBe(0o710);
    expect(after.gid).toBe(user.gid);
    expect(lines).toEqual([`let PostgreSQL's OS user 'postgres' through ${dataDir}: group postgres, mode 0710 (it runs PostgreSQL because this process runs as root)`]);
    // Idempotent: a second start changes nothing and says nothing.
    await prepareParentDirsFor(join(dataDir, 'postgres'), user, { grantTraverseOn: dataDir, log: (line) => lines.push(line) });
    expect(lines).toHaveLength(1);
  });

  it('a folder above the data dir that keeps the user out is left alone, and the error says what to do', async () => {
    const user = await postgresUser();
    const closed = join(scratch, 'closed');
    const dataDir = join(closed, 'data');
    await mkdir(dataDir, { recursive: true });
    await chmod(scratch, 0o755);
    await chmod(closed, 0o700);
    const attempt = prepareParentDirsFor(join(dataDir, 'postgres'), user, { grantTraverseOn: dataDir, log: (line) => lines.push(line) });
    if (user === null) {
      await attempt;
      return;
    }
    await expect(attempt).rejects.toThrow(
      new RegExp(`cannot enter ${closed} \\(mode 700\\).*chmod o\\+x ${closed}.*CHARGEGUARD_DATA_DIR to a folder outside ${closed}.*run as a non-root user.*DATABASE_URL`),
    );
    expect((await stat(closed)).mode & 0o777).toBe(0o700);
    expect(lines).toEqual([]);
  });

  it('a data dir whose group already has rights (0750) is not handed to another group: refused with the same advice', async () => {
    const user = await postgresUser();
    await chmod(scratch, 0o755);
    const dataDir = join(scratch, 'shared');
    await mkdir(dataDir);
    await chmod(dataDir, 0o750);
    const before = await stat(dataDir);
    const attempt = prepareParentDirsFor(join(dataDir, 'postgres'), user, { grantTraverseOn: dataDir });
    if (user === null) {
      await attempt;
      return;
    }
    await expect(attempt).rejects.toThrow(/chmod o\+x/);
    const after = await stat(dataDir);
    expect([after.mode & 0o777, after.gid]).toEqual([0o750, before.gid]);
  });
});
