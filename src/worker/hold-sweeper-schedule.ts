import { ScheduleAlreadyRunning, ScheduleOverlapPolicy, isGrpcServiceError, type Client } from '@temporalio/client';
import { waitForDependency, type DependencyWaitLimits } from '../support/dependency-wait.js';
import { chargeTaskQueue, holdSweeperWorkflowType, type HoldSweepInput } from '../../workflows/definitions.js';

/** The Temporal Schedule that starts a hold sweep; one per namespace, whoever created it first. */
export const holdSweeperScheduleId = 'chargeguard-hold-sweeper';

export const holdSweeperDefaults = {
  /** How often a sweep starts. */
  intervalMs: 5 * 60 * 1000,
  sweep: {
    releaseBatchSize: 100,
    // Reconcile's no_expired_holds grace: the hold's own timer had its minute.
    expiredGraceMs: 60_000,
    // A hold younger than one sweep interval is left alone: its workflow may be starting or retrying.
    orphanMinAgeMs: 5 * 60 * 1000,
    orphanExaminedMax: 10_000,
    activityStartToCloseMs: 10_000,
  } satisfies HoldSweepInput,
} as const;

export interface HoldSweeperScheduleOptions {
  scheduleId?: string;
  taskQueue?: string;
  intervalMs?: number;
  sweep?: Partial<HoldSweepInput>;
}

/**
 * Creates the hold sweeper's schedule unless it exists: every worker calls this at start, and the
 * first one wins. An existing schedule is left as it is (its interval and bounds may have been
 * tuned on purpose); `temporal schedule update` changes them. Overlapping sweeps are skipped: one
 * sweep at a time is enough, and two would only describe the same workflows twice.
 */
/**
 * A Temporal server that has just started answers UNAVAILABLE ("Not enough hosts to serve the
 * request") until its membership ring has formed, which the SDK's own retries (about 10 s) may not
 * outlast. A worker must not die of that at start: it waits, bounded, and says so.
 */
export const scheduleCreateWaitLimits: DependencyWaitLimits = { initialDelayMs: 500, maxDelayMs: 5_000, budgetMs: 120_000 };

const grpcUnavailable = 14;

function isServerNotReady(error: unknown): boolean {
  for (let cause: unknown = error, depth = 0; cause instanceof Error && depth < 10; cause = cause.cause, depth++) {
    if (isGrpcServiceError(cause) && cause.code === grpcUnavailable) return true;
  }
  return false;
}

export async function ensureHoldSweeperSchedule(
  temporal: Client,
  options: HoldSweeperScheduleOptions = {},
): Promise<{ scheduleId: string; created: boolean }> {
  return waitForDependency(
    { dependency: 'temporal', address: 'the Temporal frontend', purpose: 'create the hold sweeper schedule' },
    () => createHoldSweeperSchedule(temporal, options),
    { limits: scheduleCreateWaitLimits, isTransient: isServerNotReady, log: (line) => void process.stderr.write(`${line}\n`) },
  );
}

async function createHoldSweeperSchedule(
  temporal: Client,
  options: HoldSweeperScheduleOptions,
): Promise<{ scheduleId: string; created: boolean }> {
  const scheduleId = options.scheduleId ?? holdSweeperScheduleId;
  const sweep: HoldSweepInput = { ...holdSweeperDefaults.sweep, ...options.sweep };
  try {
    await temporal.schedule.create({
      scheduleId,
      spec: { intervals: [{ every: options.intervalMs ?? holdSweeperDefaults.intervalMs }] },
      action: {
        type: 'startWorkflow',
        workflowType: holdSweeperWorkflowType,
        taskQueue: options.taskQueue ?? chargeTaskQueue,
        args: [sweep],
        // Each sweep's id is the schedule id plus its start time (Temporal appends it).
        workflowId: `${scheduleId}-sweep`,
        workflowExecutionTimeout: '1 hour',
      },
      policies: { overlap: ScheduleOverlapPolicy.SKIP, catchupWindow: '10 minutes' },
    });
    return { scheduleId, created: true };
  } catch (error) {
    if (error instanceof ScheduleAlreadyRunning) return { scheduleId, created: false };
    throw error;
  }
}
