/**
 * Secrets out of anything printed or logged: a connection URL keeps its user, host and database
 * (what an operator needs to tell servers apart) and loses its password.
 */
export const maskedSecret = '***';

/**
 * `postgres://user:***@host:port/db` for any URL with a password (query parameters named like a
 * password too, as libpq accepts `?password=`). Text that does not parse as a URL is not printed at
 * all: it could be a secret in a shape we do not know.
 */
export function maskUrlPassword(url: string, what = 'URL'): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== '') parsed.password = maskedSecret;
    for (const key of [...parsed.searchParams.keys()]) {
      if (/pass|secret|key|token/i.test(key)) parsed.searchParams.set(key, maskedSecret);
    }
    return parsed.toString();
  } catch {
    return `(unparseable ${what})`;
  }
}

/** A key or token named in a log line: whether it is set, never any of its characters. */
export function maskToken(token: string | undefined): string {
  return token === undefined || token === '' ? '(not set)' : `${maskedSecret} (${token.length} chars)`;
}

/** The URL with no password at all: for lines meant to be pasted, where the password comes from PGPASSFILE. */
export function withoutUrlPassword(url: string, what = 'URL'): string {
  try {
    const parsed = new URL(url);
    parsed.password = '';
    return maskUrlPassword(parsed.toString(), what);
  } catch {
    return `(unparseable ${what})`;
  }
}
