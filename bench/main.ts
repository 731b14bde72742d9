/**
 * The bench's own entry (`npm run bench`): not a command of the product CLI, so nothing of the bench
 * is compiled into dist/ or shipped in the image (the M1 worker child is compiled on its own, see
 * bench/tsconfig.worker.json).
 */
import { resolve } from 'node:path';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { Command } from 'commander';
import { defaultSqlitePragmas } from '../src/stack/temporal-dev-server.js';
import { renderMarkdown } from './report/markdown.js';
import { docsRefusal, updateDocs, writeReport } from './report/write.js';
import { temporalKinds, type TemporalKind } from './lib/bench-stack.js';
import { defaultProviderLatencyMs } from './scenarios/p1-provider.js';
import { defaultTuning, extraSelectors, runBench, scenarioIds, type BenchOptions, type ScenarioId } from './run.js';

interface BenchFlags {
  quick?: boolean;
  only?: string;
  worker: string;
  temporal?: string;
  sqlitePragma: string[];
  phaseS?: string;
  eagerStart: boolean;
  baselineActivities: string;
  wfSlots: string;
  activitySlots: string;
  cache: string;
  pool: string;
  maxLoad: string;
  loadWaitS: string;
  out?: string;
  dataDir: string;
  keepData?: boolean;
  label?: string;
  docs: boolean;
  providerLatencyMs: string;
}

// Workers log at WARN, as under the product CLI: the bench's progress lines should not drown in polling chatter.
Runtime.install({ logger: new DefaultLogger('WARN') });

const program = new Command()
  .name('npm run bench --')
  .showHelpAfterError()
  .description('benchmarks P1–P5 and M1 against baselines measured in the same run; writes bench/results/<date>-<run id>.{json,md,svg}')
    .option('--quick', 'short phases and small counts: a smoke run of the harness, not a measurement')
    .option('--only <ids>', `comma-separated scenarios (${[...scenarioIds, ...extraSelectors].join(', ')}); P3 runs with P5`)
    .option('--worker <placement>', 'in-process | process', 'in-process')
    .option('--temporal <kinds>', `comma-separated Temporal servers P1, P3 and P5 run on, each fresh, side by side in the report (${temporalKinds.join(', ')}; default: both, or dev when TEMPORAL_ADDRESS is set); the first also runs P4 end to end and M1`)
    .option('--sqlite-pragma <pragma>', `dev server SQLite pragma NAME=VALUE (repeatable; default: ${defaultSqlitePragmas.join(' ')}, as chargeguard start runs it)`, collect, [])
    .option('--no-eager-start', 'do not ask for eager workflow start')
    .option('--baseline-activities <kind>', 'mirror | local | remote: the P1 baseline\'s steps (mirror: as ChargeWorkflow runs them)', 'mirror')
    .option('--wf-slots <n>', 'worker maxConcurrentWorkflowTaskExecutions', String(defaultTuning.maxConcurrentWorkflowTaskExecutions))
    .option('--activity-slots <n>', 'worker maxConcurrentActivityTaskExecutions', String(defaultTuning.maxConcurrentActivityTaskExecutions))
    .option('--cache <n>', 'worker maxCachedWorkflows', String(defaultTuning.maxCachedWorkflows))
    .option('--pool <n>', "worker's ledger pool connections", String(defaultTuning.ledgerPoolMaxConnections))
    .option('--max-load <n>', 'wait for the 1-minute load average to drop below this before measuring', '1.5')
    .option('--load-wait-s <n>', 'how long to wait for that at most, then measure anyway (and say so)', '900')
    .option('--out <dir>', 'where results go (default bench/results, or .data/bench-results for --quick)')
    .option('--data-dir <dir>', 'where the fresh servers of the run live', '.data/bench')
    .option('--keep-data', 'keep the servers\' data after the run')
    .option('--phase-s <n>', 'measured seconds of each load phase (default 10, --quick 2.5): longer phases give tighter ratios')
    .option('--provider-latency-ms <ms>', 'P1-provider: the Stripe simulator\'s fixed delay before each API request (0 to 10000)', String(defaultProviderLatencyMs))
    .option('--label <text>', 'a note stored with the results (what this run is comparing)')
    .option('--no-docs', 'do not update the latest-results block of docs/bench.md and README.md (never updated from a dirty tree)')
    .action(async (flags: BenchFlags) => {
      const options = toOptions(flags);
      const result = await runBench(options).catch((error: unknown) => {
        // The stack says which phase failed; the handler at the bottom prints only the message.
        process.stderr.write(`${(error as Error)?.stack ?? String(error)}\n`);
        throw error;
      });
      const outDir = resolve(flags.out ?? (options.quick ? '.data/bench-results' : 'bench/results'));
      const written = await writeReport(result, outDir);
      if (!options.quick && flags.docs && options.scenarios.size === scenarioIds.length) {
        const refusal = docsRefusal(result);
        if (refusal === null) {
          await updateDocs(result, resolve('docs/bench.md'), '../bench/results');
          await updateDocs(result, resolve('README.md'), 'bench/results');
        } else {
          process.stderr.write(`README.md and docs/bench.md left as they were: ${refusal}\n`);
        }
      }
      process.stdout.write(renderMarkdown(result, written.svgPath));
      process.stderr.write(`results: ${written.jsonPath}\n`);
      if (!result.correct) {
        process.stderr.write('a scenario failed its correctness check: the figures above do not count\n');
        process.exitCode = 1;
      }
    });

program.parseAsync(process.argv).catch((error: unknown) => {
  process.stderr.write(`error: ${(error as Error).message}\n`);
  process.exitCode = 1;
});

function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}

function toOptions(flags: BenchFlags): BenchOptions {
  const only = flags.only?.split(',').map((s) => s.trim().toLowerCase()).filter(Boolean);
  for (const id of only ?? []) {
    if (![...scenarioIds, ...extraSelectors].includes(id as ScenarioId)) throw new Error(`--only: unknown scenario ${id}`);
  }
  const scenarios = new Set<ScenarioId>((only ?? [...scenarioIds]) as ScenarioId[]);
  if (scenarios.has('p3')) scenarios.add('p5');
  if (flags.worker !== 'in-process' && flags.worker !== 'process') throw new Error('--worker must be in-process or process');
  if (!['mirror', 'local', 'remote'].includes(flags.baselineActivities)) {
    throw new Error('--baseline-activities must be mirror, local or remote');
  }
  for (const pragma of flags.sqlitePragma) {
    if (!/^[a-z_]+=[A-Za-z0-9_]+$/.test(pragma)) throw new Error(`--sqlite-pragma ${pragma}: expected NAME=VALUE`);
  }
  return {
    quick: Boolean(flags.quick),
    scenarios,
    placement: flags.worker,
    temporalKinds: parseTemporalKinds(flags.temporal),
    sqlitePragmas: flags.sqlitePragma.length > 0 ? flags.sqlitePragma : [...defaultSqlitePragmas],
    eagerStart: flags.eagerStart,
    tuning: {
      maxConcurrentWorkflowTaskExecutions: positiveInt(flags.wfSlots, '--wf-slots'),
      maxConcurrentActivityTaskExecutions: positiveInt(flags.activitySlots, '--activity-slots'),
      maxCachedWorkflows: positiveInt(flags.cache, '--cache'),
      ledgerPoolMaxConnections: positiveInt(flags.pool, '--pool'),
    },
    baselineActivityKind: flags.baselineActivities as BenchOptions['baselineActivityKind'],
    maxLoad: Number(flags.maxLoad),
    loadWaitMs: positiveInt(flags.loadWaitS, '--load-wait-s') * 1000,
    dataDir: flags.dataDir,
    keepData: Boolean(flags.keepData),
    label: flags.label ?? null,
    phaseSeconds: flags.phaseS === undefined ? null : positiveInt(flags.phaseS, '--phase-s'),
    providerLatencyMs: providerLatencyMs(flags.providerLatencyMs),
  };
}

function parseTemporalKinds(text: string | undefined): TemporalKind[] {
  const external = Boolean(process.env.TEMPORAL_ADDRESS?.trim());
  // An external server is one server: the bench can neither start a second kind nor tell which it is.
  if (text === undefined) return external ? ['dev'] : [...temporalKinds];
  const kinds = text.split(',').map((s) => s.trim().toLowerCase()).filter(Boolean);
  if (kinds.length === 0) throw new Error(`--temporal: name at least one of ${temporalKinds.join(', ')}`);
  for (const kind of kinds) {
    if (!temporalKinds.includes(kind as TemporalKind)) throw new Error(`--temporal: unknown server ${kind} (expected ${temporalKinds.join(', ')})`);
  }
  if (new Set(kinds).size !== kinds.length) throw new Error('--temporal: a server is named twice');
  if (external && (kinds.length > 1 || kinds[0] !== 'dev')) {
    throw new Error('--temporal: TEMPORAL_ADDRESS is set, so the bench runs on that one server; unset it to start the cluster, or pass --temporal dev');
  }
  return kinds as TemporalKind[];
}

/** Whole milliseconds, 0 allowed (the simulator answering at once): a bench of the provider path alone. */
function providerLatencyMs(text: string): number {
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 0 || value > 10_000) throw new Error('--provider-latency-ms must be an integer in 0..10000');
  return value;
}

function positiveInt(text: string, flag: string): number {
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 1 || value > 100_000) throw new Error(`${flag} must be an integer in 1..100000`);
  return value;
}
