/**
 * bench:overload's open-loop caller, in a process of its own (started by open-loop-caller.ts): its
 * arrivals and the timing of their answers are not delayed by the bench's own work (the ledger
 * queries, the /metrics sampler, the children's log pipes). It runs the schedules it is sent one
 * after the other, the next one's arrivals starting when the last one's end (their answers may
 * still be coming), and reports every answer with its own event loop's delay, which is the part of
 * a caller's latency that is the caller's.
 *
 * Before its first arrival it opens `warmConnections` kept-alive connections (that many concurrent
 * GET /healthz) and so has its HTTP client loaded and compiled: a caller that has been running. A
 * cold caller (0) loads fetch and opens a connection for each of its first concurrent requests while
 * the overload begins, and its first second then measures the caller's start and the API accepting
 * new connections rather than the API's refusals.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { keyMaker, sendCharge, type Answer, type OpenLoopReport, type OpenLoopSchedule, type Target } from './overload-calls.js';

const newKey = keyMaker(`${process.pid.toString(36)}-`);

async function runSchedule(target: Target, schedule: OpenLoopSchedule, pending: Promise<Answer>[]): Promise<void> {
  const startedAt = performance.now();
  for (let i = 0; ; i += 1) {
    const dueMs = (i * 1000) / schedule.ratePerSecond;
    if (dueMs >= schedule.durationMs) break;
    const lateBy = dueMs - (performance.now() - startedAt);
    if (lateBy > 0) await new Promise((resolve) => setTimeout(resolve, lateBy));
    pending.push(sendCharge(target, newKey(schedule.phase), Math.max(0, performance.now() - startedAt - dueMs)));
  }
}

/** Opens `connections` kept-alive connections to the API: as many requests at once, none of them a charge. */
async function warm(target: Target, connections: number): Promise<void> {
  const answers = await Promise.all(
    Array.from({ length: connections }, () => fetch(`${target.url}/healthz`).then(async (response) => ({ status: response.status, body: await response.text() }))),
  );
  const failed = answers.filter((a) => a.status !== 200);
  if (failed.length) throw new Error(`warming the caller's connections: ${failed.length} of ${connections} GET /healthz answered ${failed[0]!.status}`);
}

process.on('message', (message: { type?: string; target?: Target; schedules?: OpenLoopSchedule[]; warmConnections?: number }) => {
  if (message.type !== 'run' || !message.target || !message.schedules) return;
  const { target, schedules } = message;
  void (async () => {
    await warm(target, message.warmConnections ?? 0);
    const delay = monitorEventLoopDelay({ resolution: 10 });
    delay.enable();
    const pending = schedules.map(() => [] as Promise<Answer>[]);
    for (const [i, schedule] of schedules.entries()) await runSchedule(target, schedule, pending[i]!);
    const answers = await Promise.all(pending.map((each) => Promise.all(each)));
    delay.disable();
    const ms = (ns: number): number => ns / 1e6;
    const report: OpenLoopReport = {
      answers,
      loopDelayMs: { p50: ms(delay.percentile(50)), p99: ms(delay.percentile(99)), max: ms(delay.max) },
    };
    process.send?.({ type: 'report', report });
  })();
});

process.send?.({ type: 'ready' });
