import type { MandateRule } from './mandate.js';
import type { LimitScope } from './rate-limits.js';
import { errorKinds, type ErrorKind, type ErrorKindName } from './error-kinds.js';

/**
 * The typed errors every surface maps to its own protocol. `code` is stable and names the error's
 * kind in src/domain/error-kinds.ts, the one table of HTTP status, MCP advice and CLI exit code;
 * `message` is for a person.
 */
export abstract class ChargeguardError extends Error {
  abstract readonly code: ErrorKindName;

  get kind(): ErrorKind {
    return errorKinds[this.code];
  }

  /** What this error adds to its problem document, tool error and CLI JSON (the field errors, the rule…). */
  extensions(): Record<string, unknown> {
    return {};
  }
}

export interface FieldError {
  field: string;
  message: string;
}

/** The request is malformed; nothing was recorded. */
export class ValidationError extends ChargeguardError {
  readonly code = 'validation_error';
  constructor(readonly errors: FieldError[]) {
    super(errors.map((e) => `${e.field}: ${e.message}`).join('; '));
  }

  override extensions(): Record<string, unknown> {
    return { errors: this.errors };
  }
}

/** No usable API key (missing, unknown, revoked or expired): nothing is read or written. */
export class UnauthorizedError extends ChargeguardError {
  readonly code = 'unauthorized';
}

/** The key is valid but its role does not allow the operation; decided before anything is recorded. */
export class ForbiddenError extends ChargeguardError {
  readonly code = 'forbidden';
  constructor(
    /** The operation refused, as the permission table names it (e.g. accounts.open). */
    readonly operation: string,
    message: string,
  ) {
    super(message);
  }

  override extensions(): Record<string, unknown> {
    return { operation: this.operation };
  }
}

/** The charge is outside the acting key's mandate; nothing was recorded or started. */
export class MandateExceededError extends ChargeguardError {
  readonly code = 'mandate_exceeded';
  constructor(
    /** The rule broken. */
    readonly rule: MandateRule,
    message: string,
  ) {
    super(message);
  }

  override extensions(): Record<string, unknown> {
    return { rule: this.rule };
  }
}

/**
 * The ledger refused a refund because its acting key may not refund for the charge's tenant
 * (RefundNotAuthorized, SQLSTATE CGK01): unknown, another tenant's, revoked, expired, a role that
 * may not refund, or no key in a tenant that has keys. Nothing was refunded.
 */
export class RefundNotAuthorizedError extends ChargeguardError {
  readonly code = 'refund_not_authorized';
}

/** The idempotency key was first used for a different request; nothing was executed. */
export class IdempotencyConflictError extends ChargeguardError {
  readonly code = 'idempotency_conflict';
}

/** No charge (or account) under this key for this tenant. */
export class NotFoundError extends ChargeguardError {
  readonly code = 'not_found';
}

/** The charge is in a state that refuses the operation (cancel after success, capture after expiry…). */
export class ChargeStateConflictError extends ChargeguardError {
  readonly code = 'charge_state_conflict';
  constructor(
    readonly reason: string,
    message: string,
  ) {
    super(message);
  }

  override extensions(): Record<string, unknown> {
    return { reason: this.reason };
  }
}

/** The charge was declined by the ledger (only thrown by callers that ask for it). */
export class ChargeDeclinedError extends ChargeguardError {
  readonly code = 'charge_declined';
  constructor(
    readonly declineCode: string,
    message: string,
  ) {
    super(message);
  }

  override extensions(): Record<string, unknown> {
    return { reason: this.declineCode };
  }
}

/**
 * What a request was waiting for when it gave up: the Temporal frontend, the ledger database, or a
 * worker (Temporal answered, but nothing polled the task queue to run the query or update).
 */
export const dependencies = ['temporal', 'database', 'worker'] as const;
export type Dependency = (typeof dependencies)[number];

/** Temporal, PostgreSQL or a worker could not answer. Nothing is half-done: retry with the same key. */
export class UnavailableError extends ChargeguardError {
  readonly code = 'service_unavailable';
  constructor(
    readonly dependency: Dependency,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }

  override extensions(): Record<string, unknown> {
    return { dependency: this.dependency };
  }
}

/**
 * The process is deciding as many new charges as it can (its bound on charges in flight is
 * reached): this one was refused before anything was recorded or started. Replays of known keys,
 * reads, cancels and captures are not refused this way.
 */
export class OverloadedError extends ChargeguardError {
  readonly code = 'overloaded';
  constructor(
    /** Whole seconds, at least 1: the Retry-After the refusal carries. */
    readonly retryAfterSeconds: number,
    message: string,
  ) {
    super(message);
  }
}

/**
 * Over a request rate limit (`rate_limited`) or an open holds limit (`open_holds_exceeded`) of the
 * API key or of its tenant (`scope`); refused before anything was recorded or started.
 */
export class RateLimitedError extends ChargeguardError {
  constructor(
    readonly code: 'rate_limited' | 'open_holds_exceeded',
    readonly scope: LimitScope,
    /** Whole seconds, at least 1: the Retry-After the refusal carries. */
    readonly retryAfterSeconds: number,
    message: string,
  ) {
    super(message);
  }

  override extensions(): Record<string, unknown> {
    // `violated-policies` is the member the RateLimit draft defines for this (its section 5.1).
    return { scope: this.scope, ...(this.code === 'rate_limited' ? { 'violated-policies': [this.scope] } : {}) };
  }
}
