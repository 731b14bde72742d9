import type { FastifyRequest } from 'fastify';
import { ValidationError } from '../domain/errors.js';
import { decodeUtf8Strict, isBlankJsonText, parseStrictJson, StrictJsonError } from '../support/strict-json.js';

/**
 * The `application/json` body parser of every fastify scope that reads JSON (the API and /mcp, the
 * payload codec): the body's bytes through the strict decoder (src/support/strict-json.ts), so a
 * body is taken exactly as written or refused with a 400 naming `body` or the member at fault.
 */

/**
 * A body that is not UTF-8 or not JSON. Its code is fastify's own for an unparsable JSON body, so
 * problem.ts answers it as it always has (400 `malformed_json`, `errors` naming `body`), now with
 * the reason.
 */
export class MalformedJsonBodyError extends Error {
  readonly code = 'FST_ERR_CTP_INVALID_JSON_BODY';
  readonly statusCode = 400;
  constructor(readonly refusal: StrictJsonError) {
    super(`body ${refusal.problem}`);
  }
}

/** Well-formed JSON with a member the rules refuse: a validation error naming the member's path, as an unknown field is named. */
export class JsonMemberError extends ValidationError {
  constructor(readonly refusal: StrictJsonError) {
    super([{ field: refusal.field, message: refusal.problem }]);
  }
}

/** The decoder's refusal behind an error this parser reported, if it is one. */
export function strictJsonRefusalOf(error: unknown): StrictJsonError | undefined {
  return error instanceof MalformedJsonBodyError || error instanceof JsonMemberError ? error.refusal : undefined;
}

function requestErrorFor(error: unknown): unknown {
  if (!(error instanceof StrictJsonError)) return error;
  return error.kind === 'member' ? new JsonMemberError(error) : new MalformedJsonBodyError(error);
}

/**
 * The parser, for `addContentTypeParser('application/json', { parseAs: 'buffer', bodyLimit }, …)`.
 * It keeps the bytes as received in `request.rawBody` (what a signed request's Content-Digest
 * covers). A body of JSON whitespace only means "no fields" (`undefined`), as for a cancel sent by
 * curl with a JSON content type.
 */
export function strictJsonBodyParser(request: FastifyRequest, body: Buffer | string, done: (error: Error | null, value?: unknown) => void): void {
  const bytes = typeof body === 'string' ? Buffer.from(body) : body;
  request.rawBody = bytes;
  try {
    const text = decodeUtf8Strict(bytes);
    done(null, isBlankJsonText(text) ? undefined : parseStrictJson(text));
  } catch (error) {
    done(requestErrorFor(error) as Error);
  }
}
