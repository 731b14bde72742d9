/**
 * How fast a charge moves on when the worker holding it dies: the two Temporal timeouts that
 * decide it, with their defaults here (the processes read them from WORKFLOW_TASK_TIMEOUT_MS and
 * WORKFLOW_STICKY_SCHEDULE_TO_START_MS). Measured in docs/chaos.md, Single faults. Facts about the
 * workflows' own tasks, so they live with the workflows: the service that starts them and the worker
 * that runs them both read them from here, downwards.
 */

/**
 * How long a worker may hold a charge's or refund's workflow task before Temporal hands it to
 * another worker; fixed for the life of the workflow at its start. Temporal's default is 10 s, which
 * is how long a charge waited after the worker holding its task was killed. A charge's task runs
 * its ledger steps as local activities, each a few milliseconds: 2 s leaves two orders of magnitude
 * of room. The cost of a shorter one: a worker starved of CPU for longer loses the task (a spurious
 * WorkflowTaskTimedOut and a replay elsewhere, which runs again only the ledger steps the lost task
 * had not recorded, as any retried step, answered by the ledger per charge key), and a task whose local activities run longer than 80% of it (a ledger step
 * retried while PostgreSQL restarts) is extended by a heartbeat, one more round trip each 1.6 s.
 */
export const defaultWorkflowTaskTimeoutMs = 2_000;

/**
 * How long a workflow's next task waits on this worker's sticky queue (where the worker that has
 * the workflow cached polls) before it goes to the shared queue. Temporal's default is 10 s, which
 * is how long a charge needing a second task waited after the worker that ran its first was
 * killed: a SIGKILLed worker never tells the server its sticky queue is gone. The cost of 1 s: a
 * worker too busy to poll its sticky queue within 1 s lets another worker take the task, which
 * replays the workflow's history (a charge's is ~15 events: milliseconds).
 */
export const defaultStickyScheduleToStartMs = 1_000;
