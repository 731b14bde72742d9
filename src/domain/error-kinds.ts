/**
 * Every kind of error a caller can get, with what each surface answers for it: the HTTP status and
 * problem title (src/http/problem.ts), what an agent should do next (src/mcp/tool-results.ts) and
 * the CLI's exit code (src/cli/commands/surface.ts). A new refusal is one entry here and one error
 * class carrying its name (src/domain/errors.ts); the surfaces read this table and nothing else.
 */

/** What an agent should do about an error: the `retry` of an MCP tool error. */
export const retryAdvices = [
  /** Nothing was decided: the same call again, with the same idempotency key, is safe and may succeed. */
  'retry_same_key',
  /** The request itself is wrong: change what `detail` names and call again. */
  'fix_request',
  /** A decision or a permission: the same call gets the same answer; a person must act. */
  'do_not_retry',
] as const;
export type RetryAdvice = (typeof retryAdvices)[number];

/**
 * The CLI's exit codes, one per kind of failure, so that scripts can tell "retry" from "fix the
 * request" from "not allowed". 75 and 77 are sysexits.h's EX_TEMPFAIL and EX_NOPERM.
 */
export const exitCodes = {
  /** An unexpected failure: see the message. */
  failed: 1,
  /** The request is wrong (validation, key reused with another request, a bad flag): fix it, do not retry. */
  invalid: 2,
  notFound: 3,
  /** A state conflict (cancel after success…) or a decision (declined): retrying gets the same answer. */
  conflict: 4,
  /** Over a limit, or Temporal or PostgreSQL unreachable: retry the same command later, it is safe. */
  unavailable: 75,
  /** No usable API key, or the key's role or mandate does not allow it: ask the operator. */
  notPermitted: 77,
} as const;
export type ExitCode = (typeof exitCodes)[keyof typeof exitCodes];

export interface ErrorKind {
  /** HTTP status of the problem document. */
  status: number;
  /** Problem title: the same for every error of the kind (RFC 9457). */
  title: string;
  retry: RetryAdvice;
  /** The next step, in words an agent acts on (an MCP tool error's `next_step`). */
  nextStep: string;
  exitCode: ExitCode;
}

export const errorKinds = {
  validation_error: {
    status: 400,
    title: 'Invalid request',
    retry: 'fix_request',
    nextStep: 'Fix the named arguments and call again; nothing was recorded.',
    exitCode: exitCodes.invalid,
  },
  unauthorized: {
    status: 401,
    title: 'Unauthenticated',
    retry: 'do_not_retry',
    nextStep: "This server's API key is missing, unknown, revoked or expired: nothing was done. Stop and ask the operator for a valid key.",
    exitCode: exitCodes.notPermitted,
  },
  forbidden: {
    status: 403,
    title: 'Forbidden',
    retry: 'do_not_retry',
    nextStep: 'This key may not do this: nothing was done. Ask the operator; do not retry.',
    exitCode: exitCodes.notPermitted,
  },
  mandate_exceeded: {
    status: 403,
    title: 'Mandate exceeded',
    retry: 'do_not_retry',
    nextStep: 'This charge is outside what this key may charge: nothing was done. Do not retry it; ask the operator.',
    exitCode: exitCodes.notPermitted,
  },
  refund_not_authorized: {
    status: 403,
    title: 'Refund not authorized',
    retry: 'do_not_retry',
    nextStep:
      "The ledger refused this refund: the acting key may not refund for this charge's tenant, and nothing was refunded. " +
      'Do not retry it; ask the operator for a key of this tenant that may refund.',
    exitCode: exitCodes.notPermitted,
  },
  not_found: {
    status: 404,
    title: 'Not found',
    retry: 'fix_request',
    nextStep: 'Check the idempotency_key or account_id: nothing exists under it for this tenant.',
    exitCode: exitCodes.notFound,
  },
  charge_state_conflict: {
    status: 409,
    title: 'Charge state conflict',
    retry: 'do_not_retry',
    nextStep: 'The charge is in a state that refuses this operation; get_charge shows where it stands.',
    exitCode: exitCodes.conflict,
  },
  account_conflict: {
    status: 409,
    title: 'Account conflict',
    retry: 'do_not_retry',
    nextStep: 'An account with this id already exists with other settings: use it as it is, or choose another id.',
    exitCode: exitCodes.conflict,
  },
  idempotency_conflict: {
    status: 422,
    title: 'Idempotency key reused with a different request',
    retry: 'fix_request',
    nextStep: 'If you are retrying, resend the original arguments unchanged. If this is a new charge, use a new idempotency_key.',
    exitCode: exitCodes.invalid,
  },
  charge_declined: {
    status: 402,
    title: 'Charge declined',
    retry: 'do_not_retry',
    nextStep: 'The charge was declined (`reason` says why): a final answer for this idempotency_key. Do not retry it.',
    exitCode: exitCodes.conflict,
  },
  rate_limited: {
    status: 429,
    title: 'Too many requests',
    retry: 'retry_same_key',
    nextStep: 'Over a request rate limit: nothing was done. Wait a few seconds, then call again with the same idempotency_key.',
    exitCode: exitCodes.unavailable,
  },
  open_holds_exceeded: {
    status: 429,
    title: 'Too many requests',
    retry: 'retry_same_key',
    nextStep: 'Too many charges are held and not yet captured or cancelled: nothing was done. Capture or cancel some, or wait, then call again with the same idempotency_key.',
    exitCode: exitCodes.unavailable,
  },
  overloaded: {
    status: 503,
    title: 'Overloaded',
    retry: 'retry_same_key',
    nextStep: 'The service is deciding as many new charges as it can: nothing was recorded or started. Wait Retry-After seconds, then call again with the same idempotency_key.',
    exitCode: exitCodes.unavailable,
  },
  service_unavailable: {
    status: 503,
    title: 'Service unavailable',
    retry: 'retry_same_key',
    nextStep: 'A dependency is temporarily unreachable. Call the same tool again with the same idempotency_key in a few seconds: it will not charge twice.',
    exitCode: exitCodes.unavailable,
  },
  internal_error: {
    status: 500,
    title: 'Internal error',
    retry: 'retry_same_key',
    nextStep: 'Call get_charge to see where things stand before trying again with the same idempotency_key.',
    exitCode: exitCodes.failed,
  },
} as const satisfies Record<string, ErrorKind>;

export type ErrorKindName = keyof typeof errorKinds;
