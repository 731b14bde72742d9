import type { BenchResult, Figure } from './result.js';
import { round } from '../lib/stats.js';

function formatNumber(value: number | null | undefined, unit = ''): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return 'n/a';
  const rounded = round(value);
  const text = Math.abs(rounded) >= 100 ? Math.round(rounded).toLocaleString('en-US') : String(rounded);
  return unit ? `${text} ${unit}` : text;
}

function verdict(figure: Figure): string {
  if (figure.met === null) return '';
  return figure.met ? 'met' : '**missed**';
}

/** The figures table: every figure next to its same-run baseline, the ratio and the target. */
export function figuresTable(result: BenchResult): string {
  const lines = [
    '| id | measures | figure | baseline (same run) | ratio | target | |',
    '|---|---|---:|---|---:|---|---|',
  ];
  for (const figure of result.figures) {
    const baseline = figure.baseline ? `${formatNumber(figure.baseline.value, figure.baseline.unit)} — ${figure.baseline.measures}` : '—';
    lines.push(
      `| ${figure.id} | ${figure.measures} | ${formatNumber(figure.value, figure.unit)} | ${baseline} | ${figure.ratio === null ? '—' : formatNumber(figure.ratio)} | ${figure.target} | ${verdict(figure)} |`,
    );
  }
  return lines.join('\n');
}

/** Where and on what the figures were measured: they mean nothing without it. */
export function setupLines(result: BenchResult): string {
  const { machine, versions, setup, load } = result;
  const pragmas = setup.sqlitePragmas === null ? 'external server' : setup.sqlitePragmas.length === 0 ? 'dev server defaults' : setup.sqlitePragmas.join(', ');
  return [
    `- Run ${result.runId}${result.label ? ` (${result.label})` : ''}${result.quick ? ' — **quick smoke run, not a measurement**' : ''}, ${result.startedAt} → ${result.finishedAt}, commit ${versions.gitCommit ?? 'unknown'}`,
    `- Machine: ${machine.cores} cores (${machine.cpuModel}), ${(machine.memoryBytes / 2 ** 30).toFixed(1)} GiB, ${machine.platform}; 1-min load average ${load.beforeRun1m.toFixed(2)} at start${load.quietAtStart ? '' : ' (**not quiet: figures are noisy**)'}, ${load.afterRun1m.toFixed(2)} at end`,
    `- Software: Node ${versions.node}, Temporal ${versions.temporalCli ?? 'external server'}, TypeScript SDK ${versions.temporalSdk}, PostgreSQL ${versions.postgres}${versions.pgbench ? `, ${versions.pgbench}` : ', no pgbench'}`,
    `- Setup: worker ${setup.placement}, SQLite pragmas: ${pragmas}, eager start ${setup.eagerStart ? 'on' : 'off'}, baseline activities ${setup.baselineActivityKind}; worker slots ${setup.tuning.maxConcurrentWorkflowTaskExecutions} workflow / ${setup.tuning.maxConcurrentActivityTaskExecutions} activity, cache ${setup.tuning.maxCachedWorkflows}, ledger pool ${setup.tuning.ledgerPoolMaxConnections}`,
    `- Phases: ${result.settings.warmupMs / 1000} s warm-up + ${result.settings.durationMs / 1000} s measured (P4 end to end: ${result.settings.p4EndToEndDurationMs / 1000} s; P1 and P4 interleaved A B B A); correctness checked at the end of every scenario: ${result.correct ? 'all clean' : `**${result.problems.length} problems**`}`,
  ].join('\n');
}

function variantsTable(result: BenchResult): string {
  if (!result.variants || result.variants.length === 0) return '';
  const lines = [
    `| variant | charges/s N=${result.settings.variantConcurrency} | baseline workflows/s | ratio | idle p50 | idle p99 |`,
    '|---|---:|---:|---:|---:|---:|',
  ];
  for (const v of result.variants) {
    lines.push(
      `| ${v.name} | ${formatNumber(v.point.charge.operationsPerSecond)} | ${formatNumber(v.point.baseline.operationsPerSecond)} | ${formatNumber(v.point.ratio)} | ${formatNumber(v.idle.latency.p50Ms, 'ms')} | ${formatNumber(v.idle.latency.p99Ms, 'ms')} |`,
    );
  }
  return lines.join('\n');
}

function cpuTable(result: BenchResult): string {
  const rows: [string, Record<string, number>][] = [];
  for (const p of result.p1?.points ?? []) {
    rows.push([`P1 charges N=${p.concurrency}`, p.charge.cpuPercent], [`P1 baseline N=${p.concurrency}`, p.baseline.cpuPercent]);
  }
  for (const p of result.p2?.points ?? []) rows.push([`P2 ledger N=${p.concurrency}`, p.charge.cpuPercent]);
  if (result.p4Ledger) rows.push(['P4 ledger hot', result.p4Ledger.hot.cpuPercent], ['P4 ledger spread', result.p4Ledger.spread.cpuPercent]);
  if (result.p5) rows.push(['P5 idle', result.p5.idle.cpuPercent], ['P5 half load', result.p5.halfLoad.cpuPercent]);
  if (result.p3) rows.push(['P3 replays concurrent', result.p3.concurrent.cpuPercent]);
  if (rows.length === 0) return '';
  const names = [...new Set(rows.flatMap(([, cpu]) => Object.keys(cpu)))];
  const lines = [`| phase | ${names.join(' | ')} |`, `|---|${names.map(() => '---:').join('|')}|`];
  for (const [phase, cpu] of rows) lines.push(`| ${phase} | ${names.map((n) => (cpu[n] === undefined ? '—' : `${cpu[n]}%`)).join(' | ')} |`);
  return lines.join('\n');
}

/** The Markdown report written next to the JSON: table, setup, variants, CPU by component. */
export function renderMarkdown(result: BenchResult, chartFileName: string): string {
  const sections = [
    `# chargeguard bench ${result.startedAt.slice(0, 10)}`,
    setupLines(result),
    figuresTable(result),
    `![latency percentiles and throughput](${chartFileName})`,
  ];
  const variants = variantsTable(result);
  if (variants) sections.push('## Dev server pragmas and worker placement', variants);
  const cpu = cpuTable(result);
  if (cpu) {
    sections.push(
      '## CPU by component during each phase',
      'Percent of one core (the machine has ' + result.machine.cores + '); `bench` is the load generator, plus the worker when it runs in process.',
      cpu,
    );
  }
  if (result.problems.length > 0) sections.push('## Problems', result.problems.map((p) => `- ${p}`).join('\n'));
  return `${sections.join('\n\n')}\n`;
}
