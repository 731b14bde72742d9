import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { sourcesStamp } from '../build/sources-stamp.mjs';
import { cliLauncher } from './support/cli.js';

const run = promisify(execFile);

/** The command names a help text lists under "Commands:". */
function listedCommands(help: string): string[] {
  const section = help.slice(help.indexOf('Commands:'));
  return [...section.matchAll(/^ {2}([a-z][a-z-]*)\b/gm)].map((match) => match[1]!).filter((name) => name !== 'help');
}

describe('the compiled CLI (bin/chargeguard.mjs, what `npm run cli` runs)', () => {
  it('prints the top-level help the build recorded, the same as the program prints it, and runs each listed command by name alone', { timeout: 300_000 }, async () => {
    // The global setup built dist/, so nothing is compiled here.
    const recorded = await run(process.execPath, [cliLauncher, '--help']);
    expect(recorded.stderr).toBe('');
    const program = await run(process.execPath, [join('dist', 'src', 'cli', 'main.js'), '--help']);
    expect(recorded.stdout).toBe(program.stdout);
    const names = listedCommands(program.stdout);
    expect(names).toEqual(expect.arrayContaining(['start', 'worker', 'mcp', 'charge', 'status', 'refund', 'api-keys', 'reconcile', 'consume', 'events', 'webhook-endpoints']));
    expect(names).toHaveLength(18);
    // Each command is loaded on its own when named (src/cli/main.ts): its help is its own.
    for (const name of names) {
      const { stdout } = await run(process.execPath, [cliLauncher, name, '--help']);
      expect(stdout, name).toMatch(new RegExp(`^Usage: chargeguard ${name} `));
    }
    // An unknown command is refused as before, naming it, with every command loaded for the suggestion.
    const unknown = await run(process.execPath, [cliLauncher, 'stauts']).then(
      () => null,
      (error: { code: number; stderr: string }) => error,
    );
    expect(unknown?.code).toBe(1);
    expect(unknown?.stderr).toMatch(/unknown command 'stauts'/);
    expect(unknown?.stderr).toMatch(/Did you mean status\?/);
  });

  it('knows the build is stale when any source changes: its stamp covers every file under the compiled roots', async () => {
    const root = await mkdtemp(join(tmpdir(), 'chargeguard-stamp-'));
    try {
      await mkdir(join(root, 'src', 'cli'), { recursive: true });
      await writeFile(join(root, 'src', 'cli', 'main.ts'), 'export {};\n');
      await writeFile(join(root, 'tsconfig.json'), '{}\n');
      const first = sourcesStamp(root);
      expect(sourcesStamp(root)).toBe(first);
      // Touched (a checkout, an editor's save of the same text): stale.
      await utimes(join(root, 'src', 'cli', 'main.ts'), new Date(), new Date(Date.now() + 5_000));
      const touched = sourcesStamp(root);
      expect(touched).not.toBe(first);
      // A new file: stale.
      await writeFile(join(root, 'src', 'cli', 'extra.ts'), 'export {};\n');
      expect(sourcesStamp(root)).not.toBe(touched);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});
