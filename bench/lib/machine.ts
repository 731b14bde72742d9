import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { cpus, loadavg, totalmem } from 'node:os';
import { promisify } from 'node:util';
import pg from 'pg';
import { resolveTemporalCliPath } from '../../src/stack/temporal-cli.js';

const execFileAsync = promisify(execFile);

export interface MachineInfo {
  cores: number;
  cpuModel: string;
  memoryBytes: number;
  platform: string;
}

export interface SoftwareVersions {
  node: string;
  temporalCli: string | null;
  temporalSdk: string;
  postgres: string;
  pgbench: string | null;
  gitCommit: string | null;
}

export function machineInfo(): MachineInfo {
  return {
    cores: cpus().length,
    cpuModel: cpus()[0]?.model ?? 'unknown',
    memoryBytes: totalmem(),
    platform: `${process.platform}-${process.arch}`,
  };
}

export async function softwareVersions(databaseUrl: string, pgbench: string | null): Promise<SoftwareVersions> {
  const sdk = JSON.parse(await readFile(new URL('../../node_modules/@temporalio/worker/package.json', import.meta.url), 'utf8')) as { version: string };
  const temporalCli = process.env.TEMPORAL_ADDRESS
    ? null
    : await execFileAsync(resolveTemporalCliPath(), ['--version'], { timeout: 10_000 }).then((r) => r.stdout.trim(), () => null);
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  const postgres = await client
    .query<{ server_version: string }>('SHOW server_version')
    .then((r) => r.rows[0]!.server_version)
    .finally(() => client.end());
  const gitCommit = await execFileAsync('git', ['describe', '--always', '--dirty'], { timeout: 5_000 }).then((r) => r.stdout.trim(), () => null);
  return { node: process.version, temporalCli, temporalSdk: sdk.version, postgres, pgbench, gitCommit };
}

/** 1-minute load average: the other engineers' test runs share these two cores. */
export function loadAverage1m(): number {
  return loadavg()[0]!;
}

/**
 * Waits (bounded) for the 1-minute load average to drop below `maxLoad`: a measurement taken while
 * other jobs run is a measurement of them. Returns the load seen when it stopped waiting.
 */
export async function waitForQuietMachine(
  maxLoad: number,
  timeoutMs: number,
  log: (line: string) => void,
): Promise<{ load: number; waitedMs: number; quiet: boolean }> {
  const startedAtMs = Date.now();
  let lastLogAtMs = 0;
  for (;;) {
    const load = loadAverage1m();
    const waitedMs = Date.now() - startedAtMs;
    if (load < maxLoad) return { load, waitedMs, quiet: true };
    if (waitedMs >= timeoutMs) {
      log(`load average still ${load.toFixed(2)} after ${Math.round(waitedMs / 1000)} s: measuring anyway (figures will be noisy)`);
      return { load, waitedMs, quiet: false };
    }
    if (Date.now() - lastLogAtMs > 30_000) {
      log(`load average ${load.toFixed(2)} ≥ ${maxLoad}: waiting for the machine to calm down (at most ${Math.round(timeoutMs / 1000)} s)`);
      lastLogAtMs = Date.now();
    }
    await new Promise((resolve) => setTimeout(resolve, 5_000));
  }
}
