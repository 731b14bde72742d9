import type { WorkflowClientInterceptor } from '@temporalio/client';
import type { ActivityInterceptorsFactory } from '@temporalio/worker';

/**
 * Epoch milliseconds with performance.now()'s resolution: the charge's own marks are set beside the
 * Temporal server's event times (epoch, same machine), so both must be on the wall clock. One offset
 * for the process: the two clocks drift apart by far less than a millisecond over a run.
 */
export const epochOffsetMs = Date.now() - performance.now();

export function epochNowMs(): number {
  return epochOffsetMs + performance.now();
}

/** performance.now() time (the load loops' clock) as epoch milliseconds. */
export function toEpochMs(performanceMs: number): number {
  return epochOffsetMs + performanceMs;
}

/** What one charge went through, as epoch milliseconds; a mark is absent when it never happened. */
export interface ChargeMarks {
  workflowId: string;
  /** When the open loop meant the charge to arrive: its latency is measured from here. */
  scheduledMs?: number;
  /** ChargeService.charge called. */
  acceptedMs?: number;
  /** The start RPC sent, after the service's ledger reads (the key's row, the accounts). */
  startCalledMs?: number;
  startReturnedMs?: number;
  /** First attempt's start and last attempt's end of each step, as the worker ran them. */
  tryStartMs?: number;
  tryEndMs?: number;
  tryAttempts?: number;
  confirmStartMs?: number;
  confirmEndMs?: number;
  confirmAttempts?: number;
  /** ChargeService.charge answered. */
  deliveredMs?: number;
  /** The caller saw the charge succeed. */
  ok?: boolean;
}

const stepOfActivity: Record<string, 'try' | 'confirm'> = { tryCharge: 'try', confirmCharge: 'confirm' };

/**
 * Marks per charge, keyed by workflow id, filled in from three places: the load side (arrival,
 * accept, delivery), a client interceptor (the start RPC) and an activity interceptor on the worker
 * (Try and Confirm; local activities go through it too).
 */
export class ChargeTimeline {
  readonly byWorkflowId = new Map<string, ChargeMarks>();

  marks(workflowId: string): ChargeMarks {
    let marks = this.byWorkflowId.get(workflowId);
    if (marks === undefined) {
      marks = { workflowId };
      this.byWorkflowId.set(workflowId, marks);
    }
    return marks;
  }

  /** Times the ChargeWorkflow start call, which ChargeService makes after its ledger reads. */
  clientInterceptor(): WorkflowClientInterceptor {
    return {
      startWithDetails: async (input, next) => {
        const marks = input.workflowType === 'ChargeWorkflow' ? this.marks(input.options.workflowId) : null;
        if (marks) marks.startCalledMs = epochNowMs();
        const output = await next(input);
        if (marks) marks.startReturnedMs = epochNowMs();
        return output;
      },
    };
  }

  /** Times each Try and Confirm attempt as the worker runs it, after its slot was taken. */
  activityInterceptor(): ActivityInterceptorsFactory {
    return (ctx) => ({
      inbound: {
        execute: async (input, next) => {
          const step = stepOfActivity[ctx.info.activityType];
          const workflowId = ctx.info.workflowExecution?.workflowId;
          if (step === undefined || workflowId === undefined) return next(input);
          const marks = this.marks(workflowId);
          if (step === 'try') {
            marks.tryStartMs ??= epochNowMs();
            marks.tryAttempts = (marks.tryAttempts ?? 0) + 1;
          } else {
            marks.confirmStartMs ??= epochNowMs();
            marks.confirmAttempts = (marks.confirmAttempts ?? 0) + 1;
          }
          try {
            return await next(input);
          } finally {
            if (step === 'try') marks.tryEndMs = epochNowMs();
            else marks.confirmEndMs = epochNowMs();
          }
        },
      },
    });
  }
}
