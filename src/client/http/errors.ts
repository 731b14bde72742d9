import type { components } from './openapi-types.js';

export type Problem = components['schemas']['Problem'];
export type Charge = components['schemas']['Charge'];

/**
 * A problem document (RFC 9457) the API answered, thrown by the typed client. `problem` is the
 * document as sent; `type` is its stable code. Subclasses name the cases a caller handles
 * differently; anything else is a plain ProblemError.
 */
export class ProblemError extends Error {
  readonly status: number;
  readonly type: string;
  constructor(
    readonly problem: Problem,
    /** Seconds to wait before retrying, when the answer said (429, 503). */
    readonly retryAfterSeconds?: number,
  ) {
    super(`${problem.status} ${problem.type}: ${problem.detail ?? problem.title}`);
    this.name = new.target.name;
    this.status = problem.status;
    this.type = problem.type;
  }
}

/** 400: the request was malformed; `errors` names each offending field. Nothing was recorded: fix it, do not retry as is. */
export class ValidationProblemError extends ProblemError {
  get errors(): Array<{ field: string; message: string }> {
    return this.problem.errors ?? [];
  }
}

/** 401 / 403: the key is not valid, or may not do this (`operation`, or `rule` for a mandate). */
export class ForbiddenProblemError extends ProblemError {}

/** 404: no such charge, refund or account for this tenant. */
export class NotFoundProblemError extends ProblemError {}

/** 409: the object's state refuses the operation (`reason` says which), e.g. cancelling a succeeded charge. */
export class ConflictProblemError extends ProblemError {}

/**
 * 422 `idempotency_conflict`: the key was first used for a different request; nothing ran. A new
 * intent needs a new key; a retry must resend the original body.
 */
export class IdempotencyConflictError extends ProblemError {}

/**
 * 429 or 503 after the client's retries ran out: the service could not take the request for now.
 * Safe to retry later with the same idempotency key: it completes exactly once.
 */
export class UnavailableProblemError extends ProblemError {}

/** The charge was decided and declined (`decline_code` says why). No money moved; a new attempt needs a new key. */
export class ChargeDeclinedError extends Error {
  constructor(readonly charge: Charge) {
    super(`charge ${charge.idempotency_key} declined: ${charge.decline_code ?? 'no reason given'}`);
    this.name = 'ChargeDeclinedError';
  }
}

/**
 * The charge was still pending when the client's wait (pollTotalWaitMs) ran out. Nothing is lost:
 * the charge carries on; read it later (getCharge) or repeat the create with the same key.
 */
export class ChargePendingError extends Error {
  constructor(readonly charge: Charge) {
    super(`charge ${charge.idempotency_key} is still ${charge.status}: read it later with the same key`);
    this.name = 'ChargePendingError';
  }
}

/**
 * Every attempt of a request failed before an answer arrived (connection refused or lost, or no
 * answer within requestTimeoutMs). For a create, whether it ran is unknown: repeat it with the same
 * idempotency key (`idempotencyKey`), never a new one.
 */
export class NoAnswerError extends Error {
  constructor(
    readonly idempotencyKey: string | undefined,
    readonly attempts: number,
    override readonly cause: unknown,
  ) {
    super(`no answer after ${attempts} attempt(s)${idempotencyKey ? ` (idempotency key ${idempotencyKey}: retry with it)` : ''}: ${String(cause)}`);
    this.name = 'NoAnswerError';
  }
}

/** The typed error for a problem document, by its status and type. */
export function problemErrorFor(problem: Problem, retryAfterSeconds?: number): ProblemError {
  if (problem.type === 'idempotency_conflict') return new IdempotencyConflictError(problem, retryAfterSeconds);
  switch (problem.status) {
    case 400:
      return new ValidationProblemError(problem, retryAfterSeconds);
    case 401:
    case 403:
      return new ForbiddenProblemError(problem, retryAfterSeconds);
    case 404:
      return new NotFoundProblemError(problem, retryAfterSeconds);
    case 409:
      return new ConflictProblemError(problem, retryAfterSeconds);
    case 429:
    case 503:
      return new UnavailableProblemError(problem, retryAfterSeconds);
    default:
      return new ProblemError(problem, retryAfterSeconds);
  }
}
