import type { BenchResult, Figure, ServerRun } from './result.js';
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
    ...temporalLines(result),
    `- Phases: ${result.settings.warmupMs / 1000} s warm-up + ${result.settings.durationMs / 1000} s measured (P4 end to end: ${result.settings.p4EndToEndDurationMs / 1000} s; P1 and P4 interleaved A B B A); correctness checked at the end of every scenario: ${result.correct ? 'all clean' : `**${result.problems.length} problems**`}`,
  ].join('\n');
}

const serverNames: Record<ServerRun['kind'], string> = {
  dev: 'dev server (SQLite)',
  cluster: 'cluster (Temporal server on PostgreSQL)',
};

/** Which server the figures table speaks of, when it is not simply the dev server. */
function temporalLines(result: BenchResult): string[] {
  const servers = result.servers;
  if (servers && servers.length > 1) {
    return [
      `- Temporal: P1, P3 and P5 on ${servers.length} fresh servers in turn, the ledger shared: ${servers.map((s) => `${s.kind} — ${s.temporal}`).join('; ')}. ` +
        `The figures table is the ${servers[0]!.kind}'s (P4 end to end and M1 ran on it alone); the servers side by side below`,
    ];
  }
  if (result.setup.temporalKind === 'cluster') return ['- Temporal: cluster (the Temporal server on the run\'s PostgreSQL)'];
  return [];
}

/** P1, P3 and P5 of every server, a column each. */
export function serversTable(result: BenchResult): string {
  const servers = result.servers;
  if (!servers || servers.length < 2) return '';
  const rows: [string, (s: ServerRun) => string][] = [];
  const concurrencies = [...new Set(servers.flatMap((s) => s.p1?.points.map((p) => p.concurrency) ?? []))];
  for (const n of concurrencies) {
    const point = (s: ServerRun) => s.p1?.points.find((p) => p.concurrency === n);
    rows.push(
      [`P1 new charges/s, N=${n}`, (s) => formatNumber(point(s)?.charge.operationsPerSecond)],
      [`P1 ÷ bare workflow on the same server, N=${n} (target ≥ 0.9)`, (s) => formatNumber(point(s)?.ratio)],
      [`P1 charges per machine CPU-second (bare workflow), N=${n}`, (s) => {
        const p = point(s);
        return p?.chargesPerMachineCpuSecond == null ? 'n/a' : `${formatNumber(p.chargesPerMachineCpuSecond)} (${formatNumber(p.baselinePerMachineCpuSecond ?? undefined)})`;
      }],
    );
  }
  rows.push(
    ['P3 replay p50', (s) => formatNumber(s.p3?.sequential.latency.p50Ms, 'ms')],
    ['P3 replay p50 ÷ new charge p50 (target ≤ 0.1)', (s) => formatNumber(s.p3?.p50Ratio)],
    ['P3 workflow + query tasks during replays (target = 0)', (s) => (s.p3 ? formatNumber(s.p3.workflowTasksDuringReplays) : 'n/a')],
    ['P5 idle p50 (bare workflow)', (s) => (s.p5 ? `${formatNumber(s.p5.idle.latency.p50Ms, 'ms')} (${formatNumber(s.p5.idleBare?.latency.p50Ms, 'ms')})` : 'n/a')],
    ['P5 idle p50 ÷ bare workflow idle p50 (target ≤ 1.15)', (s) => formatNumber(s.p5?.idleP50OverBareP50)],
    ['P5 idle p99', (s) => formatNumber(s.p5?.idle.latency.p99Ms, 'ms')],
    ['P5 p99 at half of the server\'s own peak', (s) => (s.p5 ? `${formatNumber(s.p5.halfLoad.latency.p99Ms, 'ms')} at ${formatNumber(s.p5.peakChargesPerSecond / 2)}/s` : 'n/a')],
    ['P5 half-load p99 ÷ idle p50 (target ≤ 3)', (s) => formatNumber(s.p5?.halfLoadP99OverIdleP50)],
    ['P5 the bare workflow: p99 at half of its own peak ÷ its idle p50', (s) => (s.p5?.bareHalfLoad ? `${formatNumber(s.p5.bareHalfLoadP99OverIdleP50)} (${formatNumber(s.p5.bareHalfLoad.latency.p99Ms, 'ms')} at ${formatNumber(s.p5.bareHalfLoad.offeredPerSecond ?? undefined)}/s)` : 'n/a')],
  );
  const lines = [`| figure | ${servers.map((s) => serverNames[s.kind]).join(' | ')} |`, `|---|${servers.map(() => '---:').join('|')}|`];
  for (const [name, cell] of rows) lines.push(`| ${name} | ${servers.map(cell).join(' | ')} |`);
  return lines.join('\n');
}

/** The cluster's scale-out: both sides, their CPU by component, and what bounds the second process. */
export function scaleOutSection(result: BenchResult): string {
  const scale = result.scaleOut;
  if (!scale) return '';
  const sides = [
    ['1 worker process', scale.oneProcess],
    ['2 worker processes', scale.twoProcesses],
  ] as const;
  const names = ['bench', 'worker', 'temporal', 'postgres', 'machine'].filter((n) => sides.some(([, phase]) => phase.cpuPercent[n] !== undefined));
  const lines = [
    `| workers | charges/s N=${scale.concurrency} | p50 | p99 | ${names.map((n) => `CPU ${n}`).join(' | ')} |`,
    `|---|---:|---:|---:|${names.map(() => '---:').join('|')}|`,
  ];
  for (const [name, phase] of sides) {
    lines.push(
      `| ${name} | ${formatNumber(phase.operationsPerSecond)} | ${formatNumber(phase.latency.p50Ms, 'ms')} | ${formatNumber(phase.latency.p99Ms, 'ms')} | ${names.map((n) => (phase.cpuPercent[n] === undefined ? '—' : `${phase.cpuPercent[n]}%`)).join(' | ')} |`,
    );
  }
  return [
    lines.join('\n'),
    `2 processes ÷ 1 process: **${formatNumber(scale.ratio)}**. Bound: ${scale.bound.explanation}`,
  ].join('\n\n');
}

/** P1-provider: charges/s against the provider-shaped bare workflow, and what the simulator holds. */
export function p1ProviderSection(result: BenchResult): string {
  const run = result.p1Provider;
  if (!run) return '';
  const lines = [
    `The Stripe simulator answers each API request after **${run.providerLatencyMs} ms** (two per charge: authorize, capture). Baseline: a bare workflow of a provider charge's shape (one no-op step, ${run.baselineFirstStepKind}, then authorize and capture at the same simulator as remote activities).`,
    '',
    '| N | charges/s | baseline workflows/s | ratio | charge p50 | charge p99 | baseline p50 | baseline p99 |',
    '|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const p of run.points) {
    lines.push(
      `| ${p.concurrency} | ${formatNumber(p.charge.operationsPerSecond)} | ${formatNumber(p.baseline.operationsPerSecond)} | ${formatNumber(p.ratio)} | ${formatNumber(p.charge.latency.p50Ms, 'ms')} | ${formatNumber(p.charge.latency.p99Ms, 'ms')} | ${formatNumber(p.baseline.latency.p50Ms, 'ms')} | ${formatNumber(p.baseline.latency.p99Ms, 'ms')} |`,
    );
  }
  const v = run.provider;
  lines.push(
    '',
    `At the provider: ${v.paymentIntents} PaymentIntents for ${v.ledgerConfirmed} confirmed charges (${v.ledgerCharges} in the ledger), ` +
      `${v.chargesWithSeveralPayments} charges with more than one, ${v.notCaptured} not captured in full, ${v.capturesExecuted} captures executed, ` +
      `${v.capturedMoreThanOnce} captured twice; baseline: ${v.baselinePaymentIntents} PaymentIntents, ${v.baselineNotCaptured} not captured. ` +
      (v.ok && run.verification.ok ? 'Clean.' : `**Problems**: ${[...run.verification.problems, ...v.problems].join('; ')}.`),
  );
  return lines.join('\n');
}

/** P1-webhook beside P1 of the same run: throughput over each one's bare workflow, and the deliveries. */
export function p1WebhookSection(result: BenchResult): string {
  const run = result.p1Webhook;
  if (!run) return '';
  const lines = [
    `One webhook endpoint subscribed to ${run.enabledEvents.join(', ')}, its receiver an HTTP server on loopback in a process of its own answering 204 at once; the deliverer runs beside the workers with the configuration's defaults, as a deployed worker runs it (in P1 too, where no endpoint exists). Lag: an event's created_at to the receiver having the request.`,
    '',
    '| N | P1 charges/s (÷ bare) | with one endpoint (÷ bare) | endpoint ÷ P1, each over its bare | events delivered | duplicates | lag p50 | lag p99 | lag max |',
    '|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const p of run.points) {
    const plain = result.p1?.points.find((q) => q.concurrency === p.concurrency);
    const d = p.deliveries;
    lines.push(
      `| ${p.concurrency} | ${plain ? `${formatNumber(plain.charge.operationsPerSecond)} (${formatNumber(plain.ratio)})` : 'n/a'} | ${formatNumber(p.charge.operationsPerSecond)} (${formatNumber(p.ratio)}) | ${plain ? formatNumber(p.ratio / plain.ratio) : 'n/a'} | ${d.delivered}/${d.events} | ${d.duplicates} | ${formatNumber(d.lag.p50Ms, 'ms')} | ${formatNumber(d.lag.p99Ms, 'ms')} | ${formatNumber(d.lag.maxMs, 'ms')} |`,
    );
  }
  if (run.deliveryProblems.length > 0) lines.push('', `**Problems**: ${run.deliveryProblems.join('; ')}.`);
  return lines.join('\n');
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
  for (const p of result.p1Webhook?.points ?? []) {
    rows.push([`P1-webhook charges N=${p.concurrency}`, p.charge.cpuPercent], [`P1-webhook baseline N=${p.concurrency}`, p.baseline.cpuPercent]);
  }
  for (const p of result.p1Provider?.points ?? []) {
    rows.push([`P1-provider charges N=${p.concurrency}`, p.charge.cpuPercent], [`P1-provider baseline N=${p.concurrency}`, p.baseline.cpuPercent]);
  }
  for (const p of result.p2?.points ?? []) rows.push([`P2 ledger N=${p.concurrency}`, p.charge.cpuPercent]);
  if (result.p4Ledger) rows.push(['P4 ledger hot', result.p4Ledger.hot.cpuPercent], ['P4 ledger spread', result.p4Ledger.spread.cpuPercent]);
  if (result.p5) rows.push(['P5 idle', result.p5.idle.cpuPercent], ['P5 half load', result.p5.halfLoad.cpuPercent]);
  if (result.p3) rows.push(['P3 replays concurrent', result.p3.concurrent.cpuPercent]);
  for (const server of (result.servers ?? []).slice(1)) {
    for (const p of server.p1?.points ?? []) rows.push([`${server.kind}: P1 charges N=${p.concurrency}`, p.charge.cpuPercent]);
    if (server.p5) rows.push([`${server.kind}: P5 half load`, server.p5.halfLoad.cpuPercent]);
    if (server.p3) rows.push([`${server.kind}: P3 replays concurrent`, server.p3.concurrent.cpuPercent]);
  }
  if (result.scaleOut) {
    rows.push(['cluster: scale-out, 1 worker process', result.scaleOut.oneProcess.cpuPercent], ['cluster: scale-out, 2 worker processes', result.scaleOut.twoProcesses.cpuPercent]);
  }
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
  const servers = serversTable(result);
  if (servers) sections.push('## Both servers', servers);
  const scaleOut = scaleOutSection(result);
  if (scaleOut) sections.push('## Scale-out on the cluster', scaleOut);
  const webhook = p1WebhookSection(result);
  if (webhook) sections.push('## P1 with one webhook endpoint', webhook);
  const provider = p1ProviderSection(result);
  if (provider) sections.push('## P1 with a provider in the loop', provider);
  const variants = variantsTable(result);
  if (variants) sections.push('## Dev server pragmas and worker placement', variants);
  const cpu = cpuTable(result);
  if (cpu) {
    sections.push(
      '## CPU by component during each phase',
      'Percent of one core (the machine has ' + result.machine.cores + '); `bench` is the load generator, plus the worker when it runs in process' +
        (result.servers || result.scaleOut ? '; on the cluster `postgres` also serves Temporal\'s persistence; `machine` is every process of the machine' : '') +
        '.',
      cpu,
    );
  }
  if (result.problems.length > 0) sections.push('## Problems', result.problems.map((p) => `- ${p}`).join('\n'));
  return `${sections.join('\n\n')}\n`;
}
