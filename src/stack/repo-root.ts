import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Absolute path of the repository root, derived from this file's location (src/stack/). */
export function repoRoot(): string {
  return resolve(fileURLToPath(new URL('../../', import.meta.url)));
}
