import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import {
  ChargeguardError,
  ChargeStateConflictError,
  ForbiddenError,
  MandateExceededError,
  IdempotencyConflictError,
  NotFoundError,
  UnauthorizedError,
  UnavailableError,
  ValidationError,
} from '../service/errors.js';
import { asUnavailable } from '../service/unavailable.js';

/** A successful tool call: the JSON for the model to read, and the same object as structured content. */
export function okResult(summary: string, value: Record<string, unknown>): CallToolResult {
  return {
    content: [{ type: 'text', text: `${summary}\n${JSON.stringify(value, null, 2)}` }],
    structuredContent: value,
  };
}

/** What the model should do next, by error: the point of a tool error is the next step. */
function advice(error: unknown): string {
  if (error instanceof UnauthorizedError) {
    return 'This server\'s API key is unknown, revoked or expired: nothing was done. Stop and ask the operator for a valid key.';
  }
  if (error instanceof ForbiddenError) return 'This key may not do this: nothing was done. Ask the operator; do not retry.';
  if (error instanceof MandateExceededError) {
    return 'This charge is outside what this key may charge: nothing was done. Do not retry it; ask the operator.';
  }
  if (error instanceof ValidationError) return 'Fix the named arguments and call again; nothing was recorded.';
  if (error instanceof IdempotencyConflictError) {
    return 'If you are retrying, resend the original arguments unchanged. If this is a new charge, use a new idempotency_key.';
  }
  if (error instanceof NotFoundError) return 'Check the idempotency_key or account_id: nothing exists under it for this tenant.';
  if (error instanceof ChargeStateConflictError) return 'The charge is in a state that refuses this operation; get_charge shows where it stands.';
  if (error instanceof UnavailableError) {
    return 'A dependency is temporarily unreachable. Call the same tool again with the same idempotency_key in a few seconds: it will not charge twice.';
  }
  return 'Call get_charge to see where things stand before trying again with the same idempotency_key.';
}

/**
 * Errors become tool results the model can read (RFC 9457-like: type, detail, fields, what to do)
 * instead of protocol errors, which most agent loops surface as a crash.
 */
export function errorResult(raw: unknown): CallToolResult {
  const error = asUnavailable(raw);
  const type = error instanceof ChargeguardError ? error.code : 'internal_error';
  const detail = error instanceof ChargeguardError ? error.message : 'an unexpected error occurred';
  const value: Record<string, unknown> = { error: { type, detail, next_step: advice(error) } };
  if (error instanceof ValidationError) (value.error as Record<string, unknown>).errors = error.errors;
  if (error instanceof ChargeStateConflictError) (value.error as Record<string, unknown>).reason = error.reason;
  if (error instanceof MandateExceededError) (value.error as Record<string, unknown>).rule = error.rule;
  return {
    isError: true,
    content: [{ type: 'text', text: `${type}: ${detail}\nWhat to do: ${advice(error)}` }],
    structuredContent: value,
  };
}
