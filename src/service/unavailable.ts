import {
  QueryNotRegisteredError,
  isGrpcServiceError,
  isRetryableError,
  type ConnectionLike,
  type WorkflowClientInterceptor,
} from '@temporalio/client';
import { UnavailableError, type Dependency } from '../domain/errors.js';

/** grpc-js's ServiceError, which @temporalio/client checks for but does not export by name. */
type GrpcServiceError = typeof isGrpcServiceError extends (error: unknown) => error is infer T ? T : never;

/** The gRPC status codes this module decides on (the numbers are the wire values). */
export const grpcStatus = {
  CANCELLED: 1,
  UNKNOWN: 2,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  INTERNAL: 13,
  UNAVAILABLE: 14,
} as const;

/**
 * Codes that mean "Temporal could not answer now", not "Temporal said no". CANCELLED and
 * DEADLINE_EXCEEDED come from a server restarting (its in-flight calls are cancelled: "context
 * canceled") or from our own deadline running out while the gRPC client reconnects; the service
 * handles its own deliberate aborts before anything reaches here.
 */
const temporalNotAnsweringCodes: ReadonlySet<number> = new Set([
  grpcStatus.CANCELLED,
  grpcStatus.DEADLINE_EXCEEDED,
  grpcStatus.RESOURCE_EXHAUSTED,
  grpcStatus.UNAVAILABLE,
]);

/** Node socket errors that mean the database could not be reached. */
const socketErrorCodes = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);

/** The first gRPC status in an error's cause chain (the SDK wraps them in ServiceError and friends). */
export function grpcErrorOf(error: unknown): GrpcServiceError | null {
  for (let cause: unknown = error, depth = 0; cause instanceof Error && depth < 10; cause = cause.cause, depth++) {
    if (isGrpcServiceError(cause)) return cause;
  }
  return null;
}

export function grpcCodeOf(error: unknown): number | null {
  return grpcErrorOf(error)?.code ?? null;
}

function hasErrorNamed(error: unknown, name: string): boolean {
  for (let cause: unknown = error, depth = 0; cause instanceof Error && depth < 10; cause = cause.cause, depth++) {
    if (cause.name === name) return true;
  }
  return false;
}

export function isTemporalUnavailable(error: unknown): boolean {
  const status = grpcErrorOf(error);
  if (status !== null) {
    if (temporalNotAnsweringCodes.has(status.code)) return true;
    // The SDK's own judgement of a transient status (UNKNOWN, ABORTED, transport-level INTERNAL):
    // the same calls it would have retried itself had it had time left.
    return isRetryableError(status);
  }
  // The native (worker) connection reports a server it cannot reach as a TransportError, not a status.
  return hasErrorNamed(error, 'TransportError');
}

export function isDatabaseUnavailable(error: unknown): boolean {
  for (let cause: unknown = error, depth = 0; cause instanceof Error && depth < 10; cause = cause.cause, depth++) {
    const code = (cause as { code?: unknown }).code;
    if (typeof code === 'string') {
      if (socketErrorCodes.has(code)) return true;
      // SQLSTATE classes: 08 connection exception; 57P operator intervention (admin shutdown,
      // crash shutdown, "the database system is starting up"); 53 insufficient resources.
      if (/^(08|57P|53)/.test(code)) return true;
    }
    if (cause instanceof AggregateError && cause.errors.some((inner) => isDatabaseUnavailable(inner))) return true;
  }
  // pg reports a connection lost mid-query and a pool that could not connect in time without a
  // code; these two messages are the library's fixed texts for exactly those cases.
  const message = (error as Error | null)?.message ?? '';
  return /^Connection terminated|timeout exceeded when trying to connect/i.test(message);
}

const retryHint = 'retry with the same idempotency key';

function unavailable(dependency: Dependency, error: unknown): UnavailableError {
  const what: Record<Dependency, string> = {
    temporal: 'Temporal is unreachable',
    database: 'the ledger database is unreachable',
    worker: 'no worker answered: Temporal is up but nothing is running the charge workflows',
  };
  return new UnavailableError(dependency, `${what[dependency]}; ${retryHint}`, { cause: error });
}

/** Rethrows infrastructure failures as UnavailableError so every surface answers "retry later" the same way. */
export function asUnavailable(error: unknown): unknown {
  if (error instanceof UnavailableError) return error;
  if (isTemporalUnavailable(error)) return unavailable('temporal', error);
  if (isDatabaseUnavailable(error)) return unavailable('database', error);
  return error;
}

/** How long the "is Temporal itself answering?" question may take when a query or update times out. */
export const temporalProbeTimeoutMs = 1_000;

/**
 * A query or update that times out (or is cancelled at the deadline) has two possible culprits:
 * the Temporal frontend, or the worker that should run it. Temporal tells the second apart only
 * sometimes (FAILED_PRECONDITION "no poller seen for task queue recently" when the queue lost its
 * pollers a while ago; otherwise the call just waits until the deadline), so ask Temporal something
 * that needs no worker: if it answers, the worker is what is missing.
 */
export async function attributeWorkerTimeout(error: unknown, connection: ConnectionLike): Promise<unknown> {
  if (error instanceof UnavailableError) return error;
  const code = grpcCodeOf(error);
  if (code === grpcStatus.FAILED_PRECONDITION) return unavailable('worker', error);
  if (code !== grpcStatus.DEADLINE_EXCEEDED && code !== grpcStatus.CANCELLED) return error;
  try {
    // A fresh deadline: the caller's has already expired, and would cut the probe short at once.
    await connection.withDeadline(Date.now() + temporalProbeTimeoutMs, () => connection.workflowService.getSystemInfo({}));
  } catch {
    return unavailable('temporal', error);
  }
  return unavailable('worker', error);
}

/**
 * Every query the service sends (`status`) is registered by its workflow's first lines and never
 * throws, so Temporal's "query failed" (the client's QueryNotRegisteredError) means the worker
 * could not run the workflow's code to answer it: a workflow task failure, such as nondeterminism
 * after a deployment. Nothing is wrong with the request, and nothing was lost: the charge's state
 * is in the ledger and in Temporal, so it is a 503 to retry, not a 500.
 */
export function workflowCodeFailureOf(error: unknown): unknown {
  if (!(error instanceof QueryNotRegisteredError)) return error;
  return new UnavailableError(
    'worker',
    `the worker could not run this workflow's code to answer (${error.message.slice(0, 300)}); ` +
      `an operator must look at its failing workflow task (docs/operations.md); ${retryHint} later`,
    { cause: error },
  );
}

/**
 * Names the worker as the missing dependency when a query or update times out while Temporal itself
 * answers. Installed on the Client the surfaces use; other calls (start, describe) need no worker
 * and are classified by their status alone.
 */
export function workerAttributionInterceptor(connection: ConnectionLike): WorkflowClientInterceptor {
  const attribute = async (error: unknown): Promise<never> => {
    throw await attributeWorkerTimeout(error, connection);
  };
  return {
    query: (input, next) => next(input).catch((error: unknown) => attribute(workflowCodeFailureOf(error))),
    startUpdate: (input, next) => next(input).catch(attribute),
  };
}
