/**
 * `npm run chaos`: a storm of duplicate, concurrent and aborted charges while worker processes are
 * SIGKILLed, PostgreSQL is restarted (fast and immediate) and Temporal is restarted; then the
 * verdict on money and a table of faults, answers and recovery times. Exit status 1 when any
 * money property broke.
 *
 *   npm run chaos                      the long run (10 min)
 *   npm run chaos -- --duration-s 60   a shorter one
 *   npm run chaos -- --json out.json   also write the result as JSON
 *   npm run chaos -- --mode single --duration-s 100
 *                                      one fault at a time (worker, both workers, PostgreSQL,
 *                                      Temporal), 20 s apart, each measured on the keys in flight
 *   npm run chaos -- --mode single --single-kinds postgres --fault-gap-s 12
 *                                      only PostgreSQL crashes, 12 s apart
 *   npm run chaos -- --mode single --app-env LEDGER_RETRY_MAX_INTERVAL_MS=10000
 *                                      one setting changed for every worker and API
 *   npm run chaos -- --mode single --settings previous
 *                                      the same with the settings before the recovery work (A/B)
 *   npm run chaos -- --kafka --duration-s 60
 *                                      the queue intake: consumers SIGKILLed, the broker restarted
 *   npm run chaos -- --provider        the payment provider in the loop: the Stripe simulator is
 *                                      every process's provider, half the keys are card charges,
 *                                      and the simulator loses answers, fails and times out
 *                                      (with either mode)
 */
import { writeFile } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { Command } from 'commander';
import { singleFaultKindNames, singleFaultKindsByName } from './faults.js';
import { formatChaosReport } from './report.js';
import { runChaos } from './run.js';
import { chaosTemporalStarters, type ChaosTemporalKind } from './temporal.js';

const program = new Command('chaos')
  .option('--duration-s <seconds>', 'how long the storm and the faults last', '600')
  .option('--temporal <kind>', `Temporal to run and restart: ${Object.keys(chaosTemporalStarters).join(' | ')}`, 'cluster')
  .option('--workers <n>', 'worker processes', '2')
  .option('--apis <n>', 'API processes', '2')
  .option('--worker-kill-every-s <seconds>', 'SIGKILL a worker process this often', '5')
  .option('--postgres-restart-every-s <seconds>', 'restart PostgreSQL this often (fast and immediate in turn)', '40')
  .option('--temporal-restart-every-s <seconds>', 'restart Temporal this often', '60')
  .option('--settle-budget-s <seconds>', 'after the faults, how long callers keep re-sending undecided keys', '180')
  .option('--mode <mode>', 'storm (overlapping faults) | single (one fault at a time)', 'storm')
  .option('--fault-gap-s <seconds>', 'single mode: steady load between two faults', '20')
  .option('--single-kinds <kinds>', `single mode: comma-separated kinds of fault, in turn: ${singleFaultKindNames.join(', ')}`, singleFaultKindNames.join(','))
  .option('--temporal-postgres <which>', 'shared (Temporal persists to the ledger\'s PostgreSQL) | separate (a PostgreSQL of its own)', 'shared')
  .option('--postgres-down-ms <ms>', 'how long each PostgreSQL restart keeps the server down (a longer outage)', '0')
  .option('--app-env <setting...>', 'NAME=value given to every worker and API process (an A/B of one setting)')
  .option('--settings <which>', 'current | previous (Temporal\'s 10 s task timeouts, stale membership rows kept)', 'current')
  .option('--provider', 'the Stripe simulator as the payment provider, card charges in the storm and simulator faults')
  .option('--card-share <fraction>', 'with --provider: the share of keys sent as card charges, 0 to 1', '0.5')
  .option('--provider-fault-every-s <seconds>', 'with --provider: arm a random simulator fault this often', '3')
  .option('--cpu-hog [processes]', 'busy-looping processes competing for the CPU while the storm runs (default: one per core)')
  .option('--events', 'webhook endpoints with receivers on loopback (one flaky), delivered through the faults; the verdict counts lost events (must be 0)')
  .option('--json <file>', 'write the result as JSON')
  .option('--kafka', 'the queue intake instead (chaos/kafka.ts): consumers SIGKILLed and the broker restarted during a storm of signed, duplicated and poison messages; --duration-s, --settle-budget-s apply')
  .option('--consumers <n>', 'with --kafka: consumer processes', '2')
  .option('--consumer-kill-every-s <seconds>', 'with --kafka: SIGKILL a consumer this often', '8')
  .option('--broker-restart-every-s <seconds>', 'with --kafka: restart the broker this often', '30')
  .option('--keys-per-s <n>', 'with --kafka: new keys per second sent (each in 1-3 copies)', '4')
  .parse();

const options = program.opts<Record<string, string | boolean | undefined>>();
const seconds = (name: string): number => {
  const value = Number(options[name]);
  if (!Number.isFinite(value) || value <= 0) throw new Error(`--${name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)} must be a positive number`);
  return value * 1000;
};
const positiveWhole = (name: string, value: unknown): number => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} must be a whole number of at least 1, got ${String(value)}`);
  return n;
};
const cardShare = Number(options.cardShare);
if (!Number.isFinite(cardShare) || cardShare < 0 || cardShare > 1) throw new Error(`--card-share must be a number from 0 to 1, got ${String(options.cardShare)}`);
const provider = options.provider === true ? { cardShare, faultEveryMs: seconds('providerFaultEveryS') } : undefined;
const kind = options.temporal as ChaosTemporalKind;
const startTemporal = chaosTemporalStarters[kind];
if (startTemporal === undefined) throw new Error(`--temporal must be one of ${Object.keys(chaosTemporalStarters).join(', ')}`);

const mode = options.mode;
if (mode !== 'storm' && mode !== 'single') throw new Error(`--mode must be storm or single, got ${mode}`);
const settings = options.settings;
if (settings !== 'current' && settings !== 'previous') throw new Error(`--settings must be current or previous, got ${settings}`);

const singleKinds = String(options.singleKinds).split(',').map((name) => {
  const kind = singleFaultKindsByName[name.trim()];
  if (kind === undefined) throw new Error(`--single-kinds: unknown kind ${JSON.stringify(name)}; known: ${singleFaultKindNames.join(', ')}`);
  return kind;
});

const appEnv: Record<string, string> = {};
for (const setting of (options.appEnv as unknown as string[] | undefined) ?? []) {
  const match = /^([A-Z][A-Z0-9_]*)=(.*)$/.exec(setting);
  if (match === null) throw new Error(`--app-env takes NAME=value, got ${JSON.stringify(setting)}`);
  appEnv[match[1]!] = match[2]!;
}

const postgresDownMs = Number(options.postgresDownMs);
if (!Number.isSafeInteger(postgresDownMs) || postgresDownMs < 0 || postgresDownMs > 600_000) throw new Error('--postgres-down-ms must be an integer from 0 to 600000');

const temporalPostgres = options.temporalPostgres;
if (temporalPostgres !== 'shared' && temporalPostgres !== 'separate') throw new Error(`--temporal-postgres must be shared or separate, got ${String(temporalPostgres)}`);

if (options.kafka === true) {
  const { runKafkaChaos } = await import('./kafka.js');
  const ok = await runKafkaChaos({
    durationMs: seconds('durationS'),
    consumers: positiveWhole('consumers', options.consumers),
    consumerKillEveryMs: seconds('consumerKillEveryS'),
    brokerRestartEveryMs: seconds('brokerRestartEveryS'),
    settleBudgetMs: seconds('settleBudgetS'),
    keysPerSecond: positiveWhole('keys-per-s', options.keysPerS),
  });
  // Everything it started is stopped; nothing of the cluster run below applies.
  process.exit(ok ? 0 : 1);
}

const result = await runChaos({
  events: options.events === true,
  mode,
  temporalPostgres,
  postgresDownMs,
  appEnv,
  singleFaultKinds: singleKinds,
  settings,
  singleFaultGapMs: seconds('faultGapS'),
  durationMs: seconds('durationS'),
  workers: Number(options.workers),
  apis: Number(options.apis),
  schedule: {
    workerKillEveryMs: seconds('workerKillEveryS'),
    postgresRestartEveryMs: seconds('postgresRestartEveryS'),
    temporalRestartEveryMs: seconds('temporalRestartEveryS'),
  },
  settleBudgetMs: seconds('settleBudgetS'),
  ...(options.cpuHog === undefined ? {} : { cpuHogs: options.cpuHog === true ? availableParallelism() : positiveWhole('cpu-hog', options.cpuHog) }),
  startTemporal,
  ...(provider === undefined ? {} : { provider }),
});
process.stdout.write(`${formatChaosReport(result)}\n`);
if (typeof options.json === 'string') await writeFile(options.json, `${JSON.stringify(result, null, 2)}\n`);
process.exitCode = result.ok ? 0 : 1;
