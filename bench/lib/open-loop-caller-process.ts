/**
 * bench:overload's open-loop caller, in a process of its own (started by open-loop-caller.ts): its
 * arrivals and the timing of their answers are not delayed by the bench's own work (the ledger
 * queries, the /metrics sampler, the children's log pipes). It runs the schedules it is sent one
 * after the other, the next one's arrivals starting when the last one's end (their answers may
 * still be coming), and reports every answer with its own event loop's delay, which is the part of
 * a caller's latency that is the caller's.
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

process.on('message', (message: { type?: string; target?: Target; schedules?: OpenLoopSchedule[] }) => {
  if (message.type !== 'run' || !message.target || !message.schedules) return;
  const { target, schedules } = message;
  void (async () => {
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
