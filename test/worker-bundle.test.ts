import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { checkedWorkflowBundle, workflowBundleHeader, workflowSourcesHash } from '../src/cli/commands/worker-bundle.js';
import { runCli } from './support/cli.js';
import { testPayloadSettings, waitFor } from './support/harness.js';

const repoRoot = fileURLToPath(new URL('../', import.meta.url));
let dir: string;
let sourcesHash: string;
let stackBundle: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'chargeguard-bundle-'));
  sourcesHash = await workflowSourcesHash(repoRoot, 'typescript');
  stackBundle = await readFile(inject('stack').workflowBundlePath, 'utf8');
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function bundleFile(name: string, header: string): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, header + stackBundle);
  return path;
}

describe('worker --bundle', () => {
  it('accepts a bundle that names the workflow sources this process runs, refuses any other', async () => {
    const right = await bundleFile('right.js', workflowBundleHeader({ typescript: sourcesHash, javascript: 'x' }));
    expect(await checkedWorkflowBundle(right)).toEqual({ codePath: right });

    const other = await bundleFile('other.js', workflowBundleHeader({ typescript: 'f'.repeat(64), javascript: sourcesHash }));
    await expect(checkedWorkflowBundle(other)).rejects.toThrow(/built from other workflow code than this worker runs \(sources ffffffffffff, running /);
    const unnamed = await bundleFile('unnamed.js', '');
    await expect(checkedWorkflowBundle(unnamed)).rejects.toThrow(/not a bundle made by `npm run build`/);
    await expect(checkedWorkflowBundle(join(dir, 'missing.js'))).rejects.toThrow(/missing\.js: cannot read the workflow bundle \(ENOENT\)/);
  });

  it('the hash follows the workflow sources: the same for the same code, other for other code', async () => {
    expect(await workflowSourcesHash(repoRoot, 'typescript')).toBe(sourcesHash);
    expect(sourcesHash).toMatch(/^[0-9a-f]{64}$/);
    // tsc's output of the same sources is another form with its own hash, never mistaken for this one.
    expect(await workflowSourcesHash(repoRoot, 'javascript')).not.toBe(sourcesHash);
  });

  it('the command refuses a missing bundle before waiting for any server, naming the file', { timeout: 120_000 }, async () => {
    const missing = join(dir, 'nowhere', 'workflow-bundle.js');
    const refused = await runCli(['worker', '--bundle', missing]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(`error: --bundle ${missing}: cannot read the workflow bundle (ENOENT)`);
    expect(refused.stderr).not.toMatch(/waiting for/);
  });

  it('a worker started with a matching bundle (here from CHARGEGUARD_WORKFLOW_BUNDLE) polls with it', { timeout: 180_000 }, async () => {
    const right = await bundleFile('worker.js', workflowBundleHeader({ typescript: sourcesHash, javascript: 'x' }));
    const stack = inject('stack');
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'worker'], {
      env: { ...process.env, TEMPORAL_ADDRESS: stack.temporalAddress, DATABASE_URL: stack.databaseUrl, CHARGEGUARD_WORKFLOW_BUNDLE: right, ...testPayloadSettings() },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      await waitFor(
        async () => {
          if (child.exitCode !== null) throw new Error(`the worker exited (${child.exitCode}):\n${stderr}`);
          return stderr.includes(`; workflows from ${right})`);
        },
        { timeoutMs: 120_000, intervalMs: 100, what: 'the worker polling with the bundle' },
      );
    } finally {
      if (child.exitCode === null) child.kill('SIGTERM');
    }
    expect(await exited).toBe(0);
  });
});
