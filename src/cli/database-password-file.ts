import { createRequire } from 'node:module';
import pg from 'pg';

type PasswordLookup = (connection: { host?: string; port?: number; database?: string; user?: string }, found: (password: string | undefined) => void) => void;

// The same lookup node-postgres runs itself: libpq's rules (PGPASSFILE, else ~/.pgpass; wildcards;
// a file others can read is ignored), from the module pg uses. CommonJS without type declarations.
const lookUpPasswordFile = createRequire(import.meta.url)('pgpass') as PasswordLookup;

/**
 * `chargeguard start` prints DATABASE_URL without a password and `export PGPASSFILE=…` (the
 * embedded server's password file), so every other command gets its password from that file. pg
 * reads the file itself only on a path deprecated in pg 8 (a warning on every command that
 * connects) and removed in pg 9; its replacement is a password function, installed here as pg's
 * default. A password in the URL, or PGPASSWORD, still comes first: pg asks the default only when
 * both are empty.
 */
export function readDatabasePasswordsFromPasswordFile(): void {
  // pg calls it with the connection's parameters (host, port, database, user), what the lookup matches on.
  const fromPasswordFile = (connection: Parameters<PasswordLookup>[0]): Promise<string | undefined> =>
    new Promise((resolve) => lookUpPasswordFile(connection, resolve));
  // @types/pg narrows the defaults' password to a string; pg itself accepts a function there, as in a client's config.
  (pg.defaults as { password?: unknown }).password = fromPasswordFile;
}
