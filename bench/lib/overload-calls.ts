/**
 * One charge create as bench:overload's callers send it, timed as the caller sees it: from just
 * before the request is handed to fetch to the response's head (status and headers: what a caller
 * acts on) and to its last byte. Shared by the bench's closed loops and the open-loop caller
 * process (open-loop-caller-process.ts).
 */

/** The answer's wait budget on the API, milliseconds: a request is given up 20 s after it. */
export const overloadWaitBudgetMs = 10_000;
export const overloadPayers = 200;
export const overloadPayees = 50;
const amountMinor = 100;

export interface Target {
  url: string;
  apiKey: string;
  tenant: string;
}

export interface Answer {
  key: string;
  status: number;
  type: string | null;
  /** When it was sent, milliseconds since the epoch (the ledger's decided time is compared with it). */
  sentAtMs: number;
  /** Send → the response's head (status line and headers read), milliseconds. */
  headMs: number;
  /** Send → the response's last byte, milliseconds. */
  ms: number;
  /** How much later than its schedule the caller sent it (an open loop's own lateness; 0 in a closed loop), milliseconds. */
  lateMs: number;
  /** The API's Server-Timing stages (auth, ratelimit, admission, total), milliseconds. */
  stages: Record<string, number>;
}

/** `name;dur=ms, …` as the API sends it; a stage named twice is summed. */
function serverTimingOf(header: string | null): Record<string, number> {
  const stages: Record<string, number> = {};
  for (const match of (header ?? '').matchAll(/([A-Za-z-]+);dur=([0-9.]+)/g)) {
    stages[match[1]!] = (stages[match[1]!] ?? 0) + Number(match[2]);
  }
  return stages;
}

export async function sendCharge(target: Target, key: string, lateMs = 0): Promise<Answer> {
  const payer = `payer-${Math.floor(Math.random() * overloadPayers)}`;
  const payee = `payee-${Math.floor(Math.random() * overloadPayees)}`;
  const body = JSON.stringify({ order_id: key, payer_account_id: payer, payee_account_id: payee, amount: amountMinor, currency: 'USD' });
  const sentAtMs = Date.now();
  const startedAt = performance.now();
  let headMs = NaN;
  try {
    const response = await fetch(`${target.url}/v1/charges`, {
      method: 'POST',
      headers: { authorization: `Bearer ${target.apiKey}`, 'content-type': 'application/json', 'idempotency-key': key },
      body,
      signal: AbortSignal.timeout(overloadWaitBudgetMs + 20_000),
    });
    headMs = performance.now() - startedAt;
    const text = await response.text();
    const ms = performance.now() - startedAt;
    let type: string | null = null;
    if (response.status >= 400) type = (JSON.parse(text) as { type?: string }).type ?? null;
    return { key, status: response.status, type, sentAtMs, headMs, ms, lateMs, stages: serverTimingOf(response.headers.get('server-timing')) };
  } catch (error) {
    const ms = performance.now() - startedAt;
    return { key, status: 0, type: (error as Error).name, sentAtMs, headMs: Number.isNaN(headMs) ? ms : headMs, ms, lateMs, stages: {} };
  }
}

/** A key no other phase or process uses: letters, digits and dashes. */
export function keyMaker(prefix: string): (phase: string) => string {
  let sequence = 0;
  return (phase) => `${prefix}${phase}-${(sequence += 1)}-${Math.random().toString(36).slice(2, 8)}`;
}

/** One open-loop schedule: `ratePerSecond` arrivals for `durationMs`, a new key each. */
export interface OpenLoopSchedule {
  phase: string;
  ratePerSecond: number;
  durationMs: number;
}

/** What the open-loop caller process reports: every answer per schedule, and its own event loop's delay. */
export interface OpenLoopReport {
  answers: Answer[][];
  /** The caller's event-loop delay over the whole run (perf_hooks, 10 ms resolution), milliseconds. */
  loopDelayMs: { p50: number; p99: number; max: number };
}
