/**
 * How long a worker process of the compiled CLI (prebuilt workflow bundle, as deployed) takes from
 * its spawn to polling its task queue, on a stack that is already up and migrated: what a restart
 * after a crash costs before the worker takes charges again. Several starts in a row, each stopped
 * once ready; the load average is printed with them.
 *
 * Starts alternate A B B A between Node's compile cache on (a cache folder of the run's own, warm
 * after the first start; what the image ships, see the Dockerfile) and off (NODE_DISABLE_COMPILE_CACHE),
 * so the machine's load hits both alike; on Node 20, which has no compile cache, both are the same.
 *
 *   npx tsx bench/experiments/worker-start.ts [starts]
 */
import { spawn } from 'node:child_process';
import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildCli } from '../../chaos/processes.js';
import { migrateLedger } from '../../src/ledger/migrate.js';
import { startChargeguardProcess } from '../../src/stack/chargeguard-processes.js';
import { startChargeguardStack } from '../../src/runtime/local-stack.js';

const starts = Number(process.argv[2] ?? 5);
const dataDir = await mkdtemp(join(tmpdir(), 'chargeguard-worker-start-'));
await chmod(dataDir, 0o711);
const stack = await startChargeguardStack({ dataDir, temporalUiPort: null });
try {
  const cliEntry = await buildCli(join(dataDir, 'build'));
  await migrateLedger(stack.migrationDatabaseUrl);
  const env: Record<string, string> = {
    TEMPORAL_ADDRESS: stack.temporalAddress,
    DATABASE_URL: stack.databaseUrl,
    ...(stack.payloadKeysFilePath ? { CHARGEGUARD_PAYLOAD_KEYS_FILE: stack.payloadKeysFilePath } : {}),
    ...(stack.passwordFilePath ? { PGPASSFILE: stack.passwordFilePath } : {}),
  };
  // What loading the CLI's modules alone costs: the same entry, a command that does nothing else.
  const loadStartedAt = performance.now();
  await new Promise<void>((resolve, reject) => {
    const child = spawn(process.execPath, [cliEntry, '--help'], { stdio: 'ignore' });
    child.on('exit', () => resolve());
    child.on('error', reject);
  });
  const loadMs = performance.now() - loadStartedAt;
  const lines: string[] = [`loading the CLI alone (\`--help\`): ${Math.round(loadMs)} ms`, '', '| start | compile cache | spawn → polling | load average (1 min) |', '|---|---|---|---|'];
  const compileCacheDir = join(dataDir, 'compile-cache');
  const readyMsByCache = { on: [] as number[], off: [] as number[] };
  for (let i = 1; i <= starts; i += 1) {
    const cache = [true, false, false, true][(i - 1) % 4]! ? 'on' : 'off';
    const startedAt = performance.now();
    const worker = await startChargeguardProcess({
      name: `worker-${i}`,
      cli: { command: process.execPath, args: [cliEntry] },
      commandArgs: ['worker'],
      env: cache === 'on' ? { ...env, NODE_COMPILE_CACHE: compileCacheDir } : { ...env, NODE_DISABLE_COMPILE_CACHE: '1' },
      logFilePath: join(dataDir, `worker-${i}.log`),
      readyLine: /worker polling task queue/,
      startTimeoutMs: 120_000,
      stopTimeoutMs: 10_000,
    });
    const readyMs = performance.now() - startedAt;
    readyMsByCache[cache].push(readyMs);
    lines.push(`| ${i} | ${cache} | ${Math.round(readyMs)} ms | ${loadavg()[0]!.toFixed(2)} |`);
    await worker.stop();
  }
  const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? Number.NaN;
  lines.push(
    '',
    `median spawn → polling: cache on ${Math.round(median(readyMsByCache.on))} ms, off ${Math.round(median(readyMsByCache.off))} ms, ` +
      `on ÷ off ${(median(readyMsByCache.on) / median(readyMsByCache.off)).toFixed(2)} (node ${process.version})`,
  );
  if (process.env.SHOW_WORKER_LOG) lines.push('', await readFile(join(dataDir, 'worker-1.log'), 'utf8'));
  process.stdout.write(`${lines.join('\n')}\n`);
} finally {
  await stack.stop();
  await rm(dataDir, { recursive: true, force: true });
}
