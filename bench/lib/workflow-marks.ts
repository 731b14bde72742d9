import type { Client } from '@temporalio/client';
import protoModule from '@temporalio/proto';
import { runBounded } from './load.js';

// CommonJS: named exports are not visible to an ESM import, the default export is.
const EventType = protoModule.temporal.api.enums.v1.EventType;

/** What a charge workflow's history says happened when, by the server's clock (epoch ms). */
export interface WorkflowMarks {
  executionStartedMs: number | null;
  /** The first WorkflowTaskStarted: when a worker (or an eager start) took the first task. */
  firstTaskStartedMs: number | null;
  firstTaskCompletedMs: number | null;
  completedMs: number | null;
  /** Workflow tasks started in all (1 when the charge was decided in its first task). */
  workflowTasks: number;
}

function eventMs(time: { seconds?: unknown; nanos?: number | null } | null | undefined): number | null {
  if (time === null || time === undefined) return null;
  return Number(time.seconds ?? 0) * 1000 + (time.nanos ?? 0) / 1e6;
}

export async function readWorkflowMarks(client: Client, workflowId: string): Promise<WorkflowMarks> {
  const history = await client.workflow.getHandle(workflowId).fetchHistory();
  const marks: WorkflowMarks = { executionStartedMs: null, firstTaskStartedMs: null, firstTaskCompletedMs: null, completedMs: null, workflowTasks: 0 };
  for (const event of history.events ?? []) {
    const atMs = eventMs(event.eventTime);
    switch (event.eventType) {
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
        marks.executionStartedMs = atMs;
        break;
      case EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
        marks.workflowTasks += 1;
        marks.firstTaskStartedMs ??= atMs;
        break;
      case EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
        marks.firstTaskCompletedMs ??= atMs;
        break;
      case EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
        marks.completedMs = atMs;
        break;
      default:
        break;
    }
  }
  return marks;
}

/** Histories of many workflows, a few at a time (after the load: nothing measured is slowed). */
export async function readManyWorkflowMarks(client: Client, workflowIds: readonly string[], concurrency = 8): Promise<Map<string, WorkflowMarks>> {
  const marks = new Map<string, WorkflowMarks>();
  await runBounded(workflowIds.length, concurrency, async (i) => {
    const id = workflowIds[i]!;
    marks.set(id, await readWorkflowMarks(client, id));
  });
  return marks;
}
