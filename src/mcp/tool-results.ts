import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { ChargeguardError } from '../domain/errors.js';
import { errorKinds, type ErrorKind, type RetryAdvice } from '../domain/error-kinds.js';
import { asUnavailable } from '../service/unavailable.js';
import { withoutNulls } from './portable-schema.js';

/**
 * A successful tool call: the JSON for the model to read, and the same object as structured content,
 * without null members: the tools' portable output schemas have no null (portable-schema.ts), so a
 * member that is null over HTTP is absent here.
 */
export function okResult(summary: string, value: Record<string, unknown>): CallToolResult {
  const content = withoutNulls(value);
  return {
    content: [{ type: 'text', text: `${summary}\n${JSON.stringify(content, null, 2)}` }],
    structuredContent: content,
  };
}

/** A tool error's structured content: what went wrong and, the point of a tool error, what to do next. */
export interface ToolError {
  error: {
    type: string;
    detail: string;
    retry: RetryAdvice;
    next_step: string;
    [extension: string]: unknown;
  };
}

/**
 * Errors become tool results the model can read (RFC 9457-like: type, detail, fields, what to do)
 * instead of protocol errors, which most agent loops surface as a crash. What to do is the error
 * kind's (src/domain/error-kinds.ts).
 */
export function errorResult(raw: unknown): CallToolResult {
  const error = asUnavailable(raw);
  const known = error instanceof ChargeguardError;
  const type = known ? error.code : 'internal_error';
  const kind: ErrorKind = known ? error.kind : errorKinds.internal_error;
  const detail = known ? error.message : 'an unexpected error occurred';
  const value: ToolError = {
    error: { ...(known ? error.extensions() : {}), type, detail, retry: kind.retry, next_step: kind.nextStep },
  };
  return {
    isError: true,
    content: [{ type: 'text', text: `${type}: ${detail}\nWhat to do: ${kind.nextStep}` }],
    structuredContent: value as unknown as Record<string, unknown>,
  };
}
