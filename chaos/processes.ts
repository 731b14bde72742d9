import { symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { startChargeguardProcess, type ChargeguardProcess } from '../src/stack/chargeguard-processes.js';
import { repoRoot } from '../src/support/repo-root.js';
import { defaultSupervisorLimits, Supervisor, type SupervisorLimits } from '../src/stack/supervisor.js';
import { bundleChargeWorkflows, compiledLayout } from '../src/worker/charge-worker.js';

/**
 * Compiles the service with its workflow bundle, as `npm run build` does for a deployment, into
 * `outDir`, and returns the CLI's entry. The build resolves the repository's packages.
 */
export async function buildCli(outDir: string): Promise<string> {
  const { buildDist } = await import('../build/build.js');
  await buildDist({ outDir, workflowBundle: false, cliHelp: false });
  // A folder outside the repository still resolves the repository's packages, as ESM; the
  // workflows are bundled from the build once they can (as the build itself does in the repository).
  await writeFile(join(outDir, 'package.json'), '{ "type": "module" }\n');
  await symlink(join(repoRoot(), 'node_modules'), join(outDir, 'node_modules'), 'dir');
  const { code } = await bundleChargeWorkflows(join(outDir, compiledLayout.workflowsIndex));
  await writeFile(join(outDir, compiledLayout.workflowBundle), code);
  return join(outDir, 'src', 'cli', 'main.js');
}

/**
 * A chargeguard command (`worker`, `api`) as its own OS process, kept running by the same
 * supervisor as `start --cluster`'s (src/stack/supervisor.ts): the run SIGKILLs a process and the
 * supervisor starts it again, as in production.
 */
export type AppProcess = Supervisor<ChargeguardProcess>;

/**
 * The run kills a worker every few seconds, often the same one twice within its stable period:
 * that is the fault, not a crash loop, so the run's supervisors do not give up on it.
 */
const chaosSupervisorLimits: SupervisorLimits = { ...defaultSupervisorLimits, maxFailuresInARow: Number.MAX_SAFE_INTEGER };
const stopGraceMs = 10_000;

export function appProcess(options: {
  name: string;
  /** The compiled CLI (what a deployment runs), so a restart costs what it costs in production. */
  cliEntry: string;
  args: string[];
  env: Record<string, string>;
  readyLine: RegExp;
  logDir: string;
  readyTimeoutMs: number;
  log: (line: string) => void;
}): AppProcess {
  return new Supervisor({
    name: options.name,
    limits: chaosSupervisorLimits,
    log: options.log,
    start: () =>
      startChargeguardProcess({
        name: options.name,
        cli: { command: process.execPath, args: [options.cliEntry] },
        commandArgs: options.args,
        env: options.env,
        logFilePath: join(options.logDir, `${options.name}.log`),
        readyLine: options.readyLine,
        startTimeoutMs: options.readyTimeoutMs,
        stopTimeoutMs: stopGraceMs,
      }),
  });
}

/** SIGKILL of the incarnation running now (no drain, no cleanup); false when none is. */
export function killNow(app: AppProcess): boolean {
  const run = app.current;
  if (run === null) return false;
  process.kill(run.pid, 'SIGKILL');
  return true;
}
