import { takeCpuSnapshot, type CpuSubjects } from './cpu.js';

/** CPU seconds each subject spent between two moments (epoch ms), and those moments as read. */
export interface CpuWindow {
  fromMs: number;
  untilMs: number;
  seconds: Record<string, number>;
}

const until = (epochMs: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, Math.max(0, epochMs - Date.now())));

/**
 * Reads the subjects' CPU at `fromMs` and at `untilMs` (waiting for each): the steady part of a
 * phase, without its start and its drain, whose work belongs to the phases either side.
 */
export async function cpuWindow(subjects: CpuSubjects, fromMs: number, untilMs: number): Promise<CpuWindow> {
  await until(fromMs);
  const startedAt = Date.now();
  const before = await takeCpuSnapshot(subjects);
  await until(untilMs);
  const endedAt = Date.now();
  const after = await takeCpuSnapshot(subjects);
  const seconds: Record<string, number> = {};
  for (const [name, value] of Object.entries(after.secondsBy)) seconds[name] = value - (before.secondsBy[name] ?? Number.NaN);
  return { fromMs: startedAt, untilMs: endedAt, seconds };
}

/** The service's own components in a window: what a charge or a refusal is priced in. */
export const serviceComponents = ['api', 'worker', 'postgres', 'temporal'] as const;

/** CPU seconds of the service's components in the window, summed. */
export function serviceSeconds(window: CpuWindow): number {
  return serviceComponents.reduce((sum, name) => sum + (window.seconds[name] ?? Number.NaN), 0);
}

/** The machine's busy time in the window outside the service's components (load generators, the bench, neighbours), seconds. */
export function restOfMachineSeconds(window: CpuWindow): number {
  return (window.seconds.machine ?? Number.NaN) - serviceSeconds(window);
}
