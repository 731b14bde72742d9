/**
 * Compiles the service to JavaScript: what the Docker image runs and, with the bench's tsconfig,
 * what the bench's worker child runs (M1). A worker started from compiled code does without tsx's
 * loader thread and its transform caches (~40 MB of RSS), and one given a prebuilt workflow bundle
 * never loads webpack (~60 MB more).
 *
 *   npm run build            -> dist/
 *   npm run build -- <dir>   -> <dir>/
 *
 * The CLI (bin/chargeguard.mjs) runs dist/ and rebuilds it (with --no-workflow-bundle) when the
 * sources changed since: each build records their stamp (sources-stamp.mjs) and the CLI's help.
 */
import { spawn } from 'node:child_process';
import { cp, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { workflowBundleHeader, workflowSourcesHash } from '../src/cli/commands/worker-bundle.js';
import { bundleChargeWorkflows, compiledLayout } from '../src/worker/charge-worker.js';
import { sourcesStamp, stampFileName } from './sources-stamp.mjs';

const repoRoot = fileURLToPath(new URL('../', import.meta.url));

export interface BuildOptions {
  outDir: string;
  /**
   * Also bundle the workflows into the build (what a deployed worker loads instead of running
   * webpack at start). Off for callers that pass the worker a bundle of their own.
   */
  workflowBundle: boolean;
  /**
   * The tsconfig to compile with (default tsconfig.build.json, the product alone). The bench passes
   * one that adds its worker child, so that child never ships in dist/.
   */
  tsconfig?: string;
  /**
   * Record the CLI's top-level help (cli-help.txt, what bin/chargeguard.mjs prints). It runs the
   * built CLI, which must then resolve the repository's packages: true (the default) for a build
   * inside the repository; a build elsewhere (the chaos run's) links node_modules only afterwards.
   */
  cliHelp?: boolean;
}

/** A clean build: nothing of an earlier build survives to be run by mistake. */
export async function buildDist(options: BuildOptions): Promise<void> {
  const outDir = resolve(options.outDir);
  // Taken before anything is compiled: a source edited during the build leaves the build stale.
  const stamp = sourcesStamp(repoRoot);
  await rm(outDir, { recursive: true, force: true });
  await runTsc(['-p', options.tsconfig ?? join(repoRoot, 'tsconfig.build.json'), '--outDir', outDir]);
  // tsc emits only code; the ledger's migrations are read at run time from beside migrate.js.
  await cp(join(repoRoot, 'src', 'ledger', 'migrations'), join(outDir, 'src', 'ledger', 'migrations'), { recursive: true });
  if (options.workflowBundle) {
    // Bundled from tsc's output, so the bundle is the very code the rest of the build was made of.
    const { code } = await bundleChargeWorkflows(join(outDir, compiledLayout.workflowsIndex));
    // Named by the hash of the code it was made of, in both forms, for `worker --bundle` to check.
    const [typescript, javascript] = await Promise.all([workflowSourcesHash(repoRoot, 'typescript'), workflowSourcesHash(outDir, 'javascript')]);
    await writeFile(join(outDir, compiledLayout.workflowBundle), workflowBundleHeader({ typescript, javascript }) + code);
  }
  // The CLI's top-level help, which lists every command and so loads every command's module:
  // bin/chargeguard.mjs prints it from here instead.
  if (options.cliHelp ?? true) await writeFile(join(outDir, 'cli-help.txt'), await runNode([join(outDir, 'src', 'cli', 'main.js'), '--help']));
  // Last: what bin/chargeguard.mjs reads to know this build is whole and made of these sources.
  await writeFile(join(outDir, stampFileName), `${stamp}\n`);
}

/** Runs a script with this Node and answers its stdout. */
function runNode(args: string[]): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, args, { cwd: repoRoot, stdio: ['ignore', 'pipe', 'inherit'] });
    let stdout = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.once('error', reject);
    child.once('exit', (code, signal) =>
      code === 0 ? resolvePromise(stdout) : reject(new Error(`node ${args.join(' ')} failed (${signal ?? `exit ${code}`})`)),
    );
  });
}

function runTsc(args: string[]): Promise<void> {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, [tsc, ...args], { cwd: repoRoot, stdio: ['ignore', 'inherit', 'inherit'] });
    child.once('error', reject);
    child.once('exit', (code, signal) =>
      code === 0 ? resolvePromise() : reject(new Error(`tsc ${args.join(' ')} failed (${signal ?? `exit ${code}`})`)),
    );
  });
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  // --no-workflow-bundle: what bin/chargeguard.mjs builds for the CLI (a worker it starts bundles at start).
  const workflowBundle = !args.includes('--no-workflow-bundle');
  const outDir = resolve(args.find((arg) => !arg.startsWith('--')) ?? join(repoRoot, 'dist'));
  const startedAtMs = performance.now();
  await buildDist({ outDir, workflowBundle });
  process.stderr.write(`built ${outDir} in ${((performance.now() - startedAtMs) / 1000).toFixed(1)} s\n`);
}
