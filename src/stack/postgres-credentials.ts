import { randomBytes } from 'node:crypto';
import { chmod, writeFile } from 'node:fs/promises';
import { readFileIfPresent } from '../support/files.js';

/**
 * The embedded server's role passwords, kept in a PostgreSQL password file (the `.pgpass` format
 * psql and node-postgres read through PGPASSFILE). Random per data dir, made on first start and kept
 * with the data; the file is readable by its owner only (both clients ignore a file others can read).
 * Printed connection URLs carry no password: PGPASSFILE supplies it.
 */
const passwordBytes = 24;

/** host:port:database:user:password; `*` matches any port and database (the port changes per start). */
function lineFor(host: string, user: string, password: string): string {
  return `${escapeField(host)}:*:*:${escapeField(user)}:${escapeField(password)}`;
}

function escapeField(value: string): string {
  return value.replace(/[\\:]/g, (c) => `\\${c}`);
}

function parseLine(line: string): string[] {
  const fields: string[] = [];
  let current = '';
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (c === '\\' && i + 1 < line.length) current += line[++i];
    else if (c === ':') {
      fields.push(current);
      current = '';
    } else current += c;
  }
  fields.push(current);
  return fields;
}

/**
 * The password of each of `users` at `host` from the file, generating (and saving) the missing ones.
 * Rewrites the file only when something was added, always with mode 0600.
 */
export async function ensurePasswords(path: string, host: string, users: readonly string[]): Promise<Record<string, string>> {
  const existing = (await readFileIfPresent(path)) ?? '';
  const lines = existing.split('\n').filter((line) => line.trim() !== '' && !line.startsWith('#'));
  const passwords: Record<string, string> = {};
  for (const line of lines) {
    const [lineHost, , , user, password] = parseLine(line);
    if (lineHost === host && user !== undefined && password !== undefined && users.includes(user)) passwords[user] = password;
  }
  const missing = users.filter((user) => passwords[user] === undefined);
  for (const user of missing) passwords[user] = randomBytes(passwordBytes).toString('hex');
  if (missing.length > 0) {
    const added = missing.map((user) => lineFor(host, user, passwords[user]!));
    await writeFile(path, `${[...lines, ...added].join('\n')}\n`, { mode: 0o600 });
  }
  // A file copied in with looser permissions would be ignored by the clients that read it.
  await chmod(path, 0o600);
  return passwords;
}
