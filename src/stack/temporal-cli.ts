import { accessSync, constants, statSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { repoRoot } from '../support/repo-root.js';

const binaryName = process.platform === 'win32' ? 'temporal.exe' : 'temporal';

function isExecutableFile(path: string): boolean {
  try {
    if (!statSync(path).isFile()) return false;
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function findOnPath(name: string): string | null {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir === '') continue;
    const candidate = join(dir, name);
    if (isExecutableFile(candidate)) return candidate;
  }
  return null;
}

/** Path of the project-local CLI installed by `npm run setup`. */
export function projectTemporalCliPath(): string {
  return join(repoRoot(), '.tools', 'bin', binaryName);
}

/**
 * Locates the Temporal CLI: TEMPORAL_CLI_PATH, then the project-local install, then PATH.
 *
 * An explicit TEMPORAL_CLI_PATH that is not executable is an error rather than a fallthrough, so a
 * typo does not silently run some other temporal binary.
 */
export function resolveTemporalCliPath(): string {
  const fromEnv = process.env.TEMPORAL_CLI_PATH;
  if (fromEnv !== undefined && fromEnv !== '') {
    if (isExecutableFile(fromEnv)) return fromEnv;
    throw new Error(
      `TEMPORAL_CLI_PATH=${fromEnv} is not an executable file. Fix or unset it, then run \`npm run setup\` to install the Temporal CLI into .tools/bin.`,
    );
  }
  const local = projectTemporalCliPath();
  if (isExecutableFile(local)) return local;
  const onPath = findOnPath(binaryName);
  if (onPath !== null) return onPath;
  throw new Error(
    `Temporal CLI not found (looked at TEMPORAL_CLI_PATH, ${local} and PATH). Run \`npm run setup\` to install it, or set TEMPORAL_CLI_PATH.`,
  );
}
