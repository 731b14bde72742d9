import { readFile } from 'node:fs/promises';

/**
 * The file's text, or null when it does not exist. Only absence is an answer: a file that exists but
 * cannot be read (permissions, I/O) is an error the caller must see, not "no lock" or "no process".
 */
export async function readFileIfPresent(path: string): Promise<string | null> {
  try {
    return await readFile(path, 'utf8');
  } catch (error) {
    if (isMissingFile(error)) return null;
    throw error;
  }
}

/** The path does not exist; under /proc, ESRCH too: the process exited between open and read. */
export function isMissingFile(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException | null)?.code;
  return code === 'ENOENT' || code === 'ESRCH';
}
