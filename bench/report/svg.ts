import type { BenchResult } from './result.js';
import { round } from '../lib/stats.js';

/**
 * A hand-written SVG chart: grouped bars are all this report needs, and ~100 lines keep the bench
 * free of a charting dependency (and of a headless browser to render one).
 */

interface Series {
  name: string;
  color: string;
  values: number[];
}

interface Panel {
  title: string;
  unit: string;
  categories: string[];
  series: Series[];
  /** Log scale when values span orders of magnitude (replay vs loaded latency). */
  logScale: boolean;
}

const width = 960;
const panelHeight = 300;
const margin = { left: 70, right: 20, top: 40, bottom: 60 };
const palette = ['#2563eb', '#9ca3af', '#f59e0b', '#dc2626', '#16a34a'];

function escapeXml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

function label(value: number): string {
  if (!Number.isFinite(value)) return 'n/a';
  const r = round(value);
  return r >= 1000 ? Math.round(r).toLocaleString('en-US') : String(r);
}

function renderPanel(panel: Panel, top: number): string {
  const plotWidth = width - margin.left - margin.right;
  const plotHeight = panelHeight - margin.top - margin.bottom;
  const finite = panel.series.flatMap((s) => s.values).filter((v) => Number.isFinite(v) && v > 0);
  const max = finite.length === 0 ? 1 : Math.max(...finite);
  const min = finite.length === 0 ? 1 : Math.min(...finite);
  const logMin = Math.floor(Math.log10(min));
  const logMax = Math.ceil(Math.log10(max));
  const linearMax = niceCeiling(max);
  const scale = (value: number): number => {
    if (!Number.isFinite(value) || value <= 0) return 0;
    if (!panel.logScale) return (value / linearMax) * plotHeight;
    return ((Math.log10(value) - logMin) / Math.max(1, logMax - logMin)) * plotHeight;
  };
  const ticks = panel.logScale
    ? Array.from({ length: logMax - logMin + 1 }, (_, i) => 10 ** (logMin + i))
    : Array.from({ length: 5 }, (_, i) => (linearMax * i) / 4);
  const x0 = margin.left;
  const y0 = top + margin.top + plotHeight;
  const parts: string[] = [
    `<text x="${x0}" y="${top + 22}" font-size="15" font-weight="bold">${escapeXml(panel.title)}</text>`,
    `<text x="14" y="${top + margin.top + plotHeight / 2}" font-size="11" transform="rotate(-90 14 ${top + margin.top + plotHeight / 2})" text-anchor="middle">${escapeXml(panel.unit)}${panel.logScale ? ' (log scale)' : ''}</text>`,
  ];
  for (const tick of ticks) {
    const y = y0 - scale(tick || (panel.logScale ? 1 : 0));
    parts.push(`<line x1="${x0}" x2="${x0 + plotWidth}" y1="${y}" y2="${y}" stroke="#e5e7eb"/>`);
    parts.push(`<text x="${x0 - 6}" y="${y + 4}" font-size="10" text-anchor="end">${label(tick)}</text>`);
  }
  const groupWidth = plotWidth / Math.max(1, panel.categories.length);
  const barWidth = Math.min(40, (groupWidth * 0.8) / Math.max(1, panel.series.length));
  panel.categories.forEach((category, c) => {
    const groupX = x0 + c * groupWidth + (groupWidth - barWidth * panel.series.length) / 2;
    panel.series.forEach((series, s) => {
      const value = series.values[c] ?? Number.NaN;
      const h = scale(value);
      const x = groupX + s * barWidth;
      parts.push(`<rect x="${x.toFixed(1)}" y="${(y0 - h).toFixed(1)}" width="${(barWidth - 2).toFixed(1)}" height="${h.toFixed(1)}" fill="${series.color}"><title>${escapeXml(`${series.name}, ${category}: ${label(value)} ${panel.unit}`)}</title></rect>`);
      parts.push(`<text x="${(x + barWidth / 2 - 1).toFixed(1)}" y="${(y0 - h - 3).toFixed(1)}" font-size="9" text-anchor="middle">${label(value)}</text>`);
    });
    parts.push(`<text x="${(x0 + c * groupWidth + groupWidth / 2).toFixed(1)}" y="${y0 + 16}" font-size="11" text-anchor="middle">${escapeXml(category)}</text>`);
  });
  parts.push(`<line x1="${x0}" x2="${x0 + plotWidth}" y1="${y0}" y2="${y0}" stroke="#111"/>`);
  panel.series.forEach((series, s) => {
    const lx = x0 + s * 230;
    parts.push(`<rect x="${lx}" y="${y0 + 32}" width="12" height="12" fill="${series.color}"/>`);
    parts.push(`<text x="${lx + 16}" y="${y0 + 42}" font-size="11">${escapeXml(series.name)}</text>`);
  });
  return parts.join('\n');
}

function niceCeiling(value: number): number {
  const magnitude = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) if (step * magnitude >= value) return step * magnitude;
  return 10 * magnitude;
}

function panelsFor(result: BenchResult): Panel[] {
  const panels: Panel[] = [];
  if (result.p1) {
    panels.push({
      title: 'P1: new charges per second vs the bare 3-activity workflow (closed loop)',
      unit: 'per second',
      categories: result.p1.points.map((p) => `N=${p.concurrency}`),
      series: [
        { name: 'charges/s', color: palette[0]!, values: result.p1.points.map((p) => p.charge.operationsPerSecond) },
        { name: 'baseline workflows/s', color: palette[1]!, values: result.p1.points.map((p) => p.baseline.operationsPerSecond) },
      ],
      logScale: false,
    });
  }
  const latency: { name: string; p50: number; p90: number; p99: number }[] = [];
  if (result.p5) {
    latency.push({ name: 'new charge, idle', ...pick(result.p5.idle.latency) });
    latency.push({ name: 'new charge, half of peak', ...pick(result.p5.halfLoad.latency) });
  }
  if (result.p3) latency.push({ name: 'replay, one at a time', ...pick(result.p3.sequential.latency) });
  if (result.p3) latency.push({ name: `replay, N=${result.p3.concurrent.concurrency}`, ...pick(result.p3.concurrent.latency) });
  for (const p of result.p1?.points ?? []) latency.push({ name: `charge, N=${p.concurrency}`, ...pick(p.charge.latency) });
  if (latency.length > 0) {
    panels.push({
      title: 'Latency percentiles (end to end, as the caller sees them)',
      unit: 'ms',
      categories: latency.map((l) => l.name),
      series: [
        { name: 'p50', color: palette[0]!, values: latency.map((l) => l.p50) },
        { name: 'p90', color: palette[2]!, values: latency.map((l) => l.p90) },
        { name: 'p99', color: palette[3]!, values: latency.map((l) => l.p99) },
      ],
      logScale: true,
    });
  }
  const ledger: { name: string; value: number; baseline: number }[] = [];
  for (const p of result.p2?.points ?? []) {
    ledger.push({ name: `P2 N=${p.concurrency}`, value: p.charge.operationsPerSecond, baseline: (p.pgbench ?? p.tpcbWithPg).operationsPerSecond });
  }
  if (result.p4Ledger) ledger.push({ name: `P4 ledger N=${result.p4Ledger.concurrency}`, value: result.p4Ledger.hot.operationsPerSecond, baseline: result.p4Ledger.spread.operationsPerSecond });
  if (result.p4EndToEnd) ledger.push({ name: `P4 end to end N=${result.p4EndToEnd.concurrency}`, value: result.p4EndToEnd.hot.operationsPerSecond, baseline: result.p4EndToEnd.spread.operationsPerSecond });
  if (ledger.length > 0) {
    panels.push({
      title: 'Ledger: Try+Confirm pairs/s vs TPC-B tps (P2); hot payee vs spread traffic (P4)',
      unit: 'per second',
      categories: ledger.map((l) => l.name),
      series: [
        { name: 'measured (P2 pairs/s, P4 hot)', color: palette[0]!, values: ledger.map((l) => l.value) },
        { name: 'baseline (TPC-B tps, P4 spread)', color: palette[1]!, values: ledger.map((l) => l.baseline) },
      ],
      logScale: false,
    });
  }
  return panels;
}

function pick(latency: { p50Ms: number; p90Ms: number; p99Ms: number }): { p50: number; p90: number; p99: number } {
  return { p50: latency.p50Ms, p90: latency.p90Ms, p99: latency.p99Ms };
}

export function renderSvg(result: BenchResult): string {
  const panels = panelsFor(result);
  const height = Math.max(1, panels.length) * panelHeight + 30;
  // The panels are the primary server's figures: name which server that was when it is the cluster.
  const temporal = result.setup.temporalKind === 'cluster' ? 'Temporal server on PostgreSQL (cluster)' : `Temporal ${result.versions.temporalCli ?? 'external'}`;
  const caption = `chargeguard bench ${result.runId}: ${result.machine.cores} cores, ${temporal}, PostgreSQL ${result.versions.postgres}, Node ${result.versions.node}${result.quick ? ' (quick smoke run)' : ''}`;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, sans-serif">`,
    `<rect width="${width}" height="${height}" fill="#fff"/>`,
    ...panels.map((panel, i) => renderPanel(panel, i * panelHeight)),
    `<text x="${margin.left}" y="${height - 10}" font-size="10" fill="#555">${escapeXml(caption)}</text>`,
    '</svg>',
    '',
  ].join('\n');
}
