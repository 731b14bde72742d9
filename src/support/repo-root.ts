import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Absolute path of the repository root: the nearest folder above this file (src/support/, or
 * dist/src/support/ in a build) that holds package.json.
 */
export function repoRoot(): string {
  let dir = resolve(fileURLToPath(new URL('../../', import.meta.url)));
  while (!existsSync(join(dir, 'package.json'))) {
    const parent = dirname(dir);
    if (parent === dir) return resolve(fileURLToPath(new URL('../../', import.meta.url)));
    dir = parent;
  }
  return dir;
}
