import { resolve } from 'node:path';
import type { Command } from 'commander';
import { defaultTuning, extraSelectors, runBench, scenarioIds, type BenchOptions, type ScenarioId } from '../../../bench/run.js';
import { renderMarkdown } from '../../../bench/report/markdown.js';
import { updateDocs, writeReport } from '../../../bench/report/write.js';
import { defaultSqlitePragmas } from '../../stack/temporal-dev-server.js';

interface BenchFlags {
  quick?: boolean;
  only?: string;
  worker: string;
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
}

export function registerBenchCommand(program: Command): void {
  program
    .command('bench')
    .description('benchmarks P1–P5 and M1 against baselines measured in the same run; writes bench/results/<date>.{json,md,svg}')
    .option('--quick', 'short phases and small counts: a smoke run of the harness, not a measurement')
    .option('--only <ids>', `comma-separated scenarios (${[...scenarioIds, ...extraSelectors].join(', ')}); P3 runs with P5`)
    .option('--worker <placement>', 'in-process | process', 'in-process')
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
    .option('--label <text>', 'a note stored with the results (what this run is comparing)')
    .option('--no-docs', 'do not update the latest-results block of docs/bench.md')
    .action(async (flags: BenchFlags) => {
      const options = toOptions(flags);
      const result = await runBench(options).catch((error: unknown) => {
        // The stack says which phase failed; main.ts prints only the message.
        process.stderr.write(`${(error as Error)?.stack ?? String(error)}\n`);
        throw error;
      });
      const outDir = resolve(flags.out ?? (options.quick ? '.data/bench-results' : 'bench/results'));
      const written = await writeReport(result, outDir);
      if (!options.quick && flags.docs && options.scenarios.size === scenarioIds.length) {
        await updateDocs(result, resolve('docs/bench.md'), '../bench/results');
        await updateDocs(result, resolve('README.md'), 'bench/results');
      }
      process.stdout.write(renderMarkdown(result, written.svgPath));
      process.stderr.write(`results: ${written.jsonPath}\n`);
      if (!result.correct) {
        process.stderr.write('a scenario failed its correctness check: the figures above do not count\n');
        process.exitCode = 1;
      }
    });
}

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
  };
}

function positiveInt(text: string, flag: string): number {
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 1 || value > 100_000) throw new Error(`${flag} must be an integer in 1..100000`);
  return value;
}
