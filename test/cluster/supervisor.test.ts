import { describe, expect, it } from 'vitest';
import { GaveUpError, Supervisor, type SupervisedRun, type SupervisorLimits } from '../../src/stack/supervisor.js';
import { waitFor } from '../support/harness.js';

/** A process stand-in whose exit the test decides. */
interface FakeRun extends SupervisedRun {
  exit(outcome: { code: number | null; signal: NodeJS.Signals | null }): void;
  stopped: boolean;
}

function fakeProcesses(): { start: () => Promise<FakeRun>; runs: FakeRun[]; failNextStarts: number } {
  const state = {
    runs: [] as FakeRun[],
    failNextStarts: 0,
    start: async (): Promise<FakeRun> => {
      if (state.failNextStarts > 0) {
        state.failNextStarts -= 1;
        throw new Error('port already in use');
      }
      let exit!: FakeRun['exit'];
      const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => (exit = resolve));
      const run: FakeRun = {
        pid: 1000 + state.runs.length,
        exited,
        exit,
        stopped: false,
        stop: async () => {
          run.stopped = true;
          exit({ code: 0, signal: null });
        },
      };
      state.runs.push(run);
      return run;
    },
  };
  return state;
}

const quick: SupervisorLimits = { initialDelayMs: 5, maxDelayMs: 40, stableAfterMs: 60_000, maxFailuresInARow: 4 };

describe('the supervisor of the processes start --cluster owns', () => {
  it('restarts a process that exits, says which, how and when the next attempt is, and doubles the delay while it keeps failing', async () => {
    const fake = fakeProcesses();
    const lines: string[] = [];
    const supervisor = new Supervisor({ name: 'worker-1', start: fake.start, limits: quick, log: (line) => lines.push(line) });
    await supervisor.start();
    fake.runs[0]!.exit({ code: null, signal: 'SIGKILL' });
    await waitFor(async () => fake.runs.length === 2 && supervisor.current === fake.runs[1], { timeoutMs: 5_000, what: 'the first restart' });
    fake.runs[1]!.exit({ code: 70, signal: null });
    await waitFor(async () => fake.runs.length === 3 && supervisor.current === fake.runs[2], { timeoutMs: 5_000, what: 'the second restart' });
    expect(supervisor.restarts).toBe(2);
    expect(lines).toEqual([
      expect.stringMatching(/^worker-1 \(pid 1000\) exited \(signal SIGKILL\) after \d+ ms$/),
      'worker-1: restart 1 in 5 ms',
      expect.stringMatching(/^worker-1: restarted \(pid 1001\)/),
      expect.stringMatching(/^worker-1 \(pid 1001\) exited \(code 70\) after \d+ ms$/),
      'worker-1: restart 2 in 10 ms',
      expect.stringMatching(/^worker-1: restarted \(pid 1002\)/),
    ]);
    await supervisor.stop();
    expect(fake.runs[2]!.stopped).toBe(true);
  });

  it('gives up on a crash loop (exits and failed starts in a row) and says why', async () => {
    const fake = fakeProcesses();
    const lines: string[] = [];
    const supervisor = new Supervisor({ name: 'api-1', start: fake.start, limits: quick, log: (line) => lines.push(line) });
    await supervisor.start();
    fake.failNextStarts = 2;
    fake.runs[0]!.exit({ code: 1, signal: null });
    // Failure 1 (the exit), 2 and 3 (the starts that failed), then a run that exits again: 4.
    await waitFor(async () => fake.runs.length === 2, { timeoutMs: 5_000, what: 'the restart after two failed starts' });
    fake.runs[1]!.exit({ code: 1, signal: null });
    const gaveUp = await supervisor.gaveUp.then(
      () => null,
      (error: unknown) => error,
    );
    expect(gaveUp).toBeInstanceOf(GaveUpError);
    expect((gaveUp as Error).message).toMatch(/giving up on api-1 after 4 failures in a row/);
    expect(lines.filter((line) => line.includes('failed: port already in use'))).toHaveLength(2);
    expect(lines).toContain('api-1: restart 3 in 20 ms');
    expect(fake.runs).toHaveLength(2);
    expect(supervisor.current).toBeNull();
  });

  it('starts from the initial delay again after a run that lasted its stable period', async () => {
    const fake = fakeProcesses();
    const lines: string[] = [];
    const supervisor = new Supervisor({ name: 'temporal', start: fake.start, limits: { ...quick, stableAfterMs: 0 }, log: (line) => lines.push(line) });
    await supervisor.start();
    for (let i = 0; i < 6; i++) {
      fake.runs[i]!.exit({ code: 1, signal: null });
      await waitFor(async () => fake.runs.length === i + 2 && supervisor.current === fake.runs[i + 1], { timeoutMs: 5_000, what: `restart ${i + 1}` });
    }
    // Every run counted as stable: six restarts, none given up, each after the initial delay.
    expect(lines.filter((line) => /restart \d+ in 5 ms/.test(line))).toHaveLength(6);
    await supervisor.stop();
  });

  it('does not restart what it was asked to stop', async () => {
    const fake = fakeProcesses();
    const supervisor = new Supervisor({ name: 'worker-2', start: fake.start, limits: quick, log: () => undefined });
    await supervisor.start();
    await supervisor.stop();
    expect(fake.runs[0]!.stopped).toBe(true);
    expect(supervisor.restarts).toBe(0);
    expect(fake.runs).toHaveLength(1);
  });
});
