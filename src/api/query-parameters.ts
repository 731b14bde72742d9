import type { FastifyRequest } from 'fastify';
import { ValidationError, type FieldError } from '../domain/errors.js';
import { assertWellFormedQuery } from './request-headers.js';

/**
 * Query parameters a route does not take are refused on every route of the API, as unknown body
 * fields are: a misspelt filter or a Stripe habit (`expand[]`) must not be silently ignored. What a
 * route takes is what its schema's `querystring` declares, the same list the OpenAPI document
 * shows; a route that declares none takes none. Routes hidden from the document (the Swagger UI's
 * own files, the codec's protocol) keep their own rules.
 */
export async function refuseUnknownQueryParameters(request: FastifyRequest): Promise<void> {
  const schema = request.routeOptions.schema as { hide?: boolean; querystring?: { properties?: Record<string, unknown> } } | undefined;
  // No route (the 404 handler) or a hidden one: not the API's to judge here.
  if (request.routeOptions.url === undefined || schema?.hide === true) return;
  assertWellFormedQuery(request);
  const known = Object.keys(schema?.querystring?.properties ?? {});
  const errors: FieldError[] = [];
  for (const name of Object.keys((request.query ?? {}) as Record<string, unknown>)) {
    if (known.includes(name)) continue;
    errors.push({ field: name, message: isExpand(name) ? expandRefusal : unknownParameter(known) });
  }
  if (errors.length > 0) throw new ValidationError(errors);
}

/** Stripe's `expand` / `expand[]` / `expand[0]`: named as what it is, not as a typo. */
function isExpand(name: string): boolean {
  return name === 'expand' || name.startsWith('expand[');
}

export const expandRefusal = 'is not supported: expand is not supported; every object is returned whole';

function unknownParameter(known: readonly string[]): string {
  return known.length === 0
    ? 'is not a known query parameter: this route takes none'
    : `is not a known query parameter (this route takes ${known.join(', ')})`;
}
