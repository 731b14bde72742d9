import type { FastifyInstance } from 'fastify';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { z } from 'zod';
import { createAccountBodySchema, depositBodySchema } from '../service/accounts-service.js';
import { chargeRequestSchema } from '../service/validation.js';
import { limits, textPatterns } from '../domain/limits.js';
import { refuseOtherMethods } from './routes/method-not-allowed.js';
import { wireAccountSchema, wireChargeSchema, wireDepositSchema, wireProblemSchema, wireRefundSchema } from '../service/wire.js';
import {
  idempotencyTokenLength,
  idempotencyTokenPattern,
  issueTokenBodySchema,
  wireIdempotencyTokenSchema,
} from '../service/idempotency-tokens.js';

/**
 * The OpenAPI 3.1 document is generated from the same zod schemas that validate requests (in the
 * service) and describe responses (in wire.ts), so the document cannot drift from the code.
 */

type JsonSchema = Record<string, unknown>;

function jsonSchema(schema: z.ZodType, io: 'input' | 'output'): JsonSchema {
  const { $schema: _dialect, ...rest } = z.toJSONSchema(schema, { target: 'draft-2020-12', io, unrepresentable: 'any' }) as JsonSchema;
  return rest;
}

export function componentSchemas(amountMinorMax: number): Record<string, JsonSchema> {
  return {
    Charge: jsonSchema(wireChargeSchema, 'output'),
    Account: jsonSchema(wireAccountSchema, 'output'),
    Deposit: jsonSchema(wireDepositSchema, 'output'),
    Refund: jsonSchema(wireRefundSchema, 'output'),
    Problem: jsonSchema(wireProblemSchema, 'output'),
    CreateChargeRequest: jsonSchema(chargeRequestSchema(amountMinorMax), 'input'),
    CreateAccountRequest: jsonSchema(createAccountBodySchema(), 'input'),
    DepositRequest: jsonSchema(depositBodySchema(amountMinorMax), 'input'),
    IdempotencyToken: jsonSchema(wireIdempotencyTokenSchema, 'output'),
    IssueIdempotencyTokenRequest: jsonSchema(issueTokenBodySchema, 'input'),
    CaptureRequest: {
      type: 'object',
      properties: {
        amount: {
          type: 'integer',
          minimum: 1,
          maximum: amountMinorMax,
          description: 'capture less than authorised; the rest is released. Leave it out to capture all: null is refused',
        },
      },
      additionalProperties: false,
    },
    RefundRequest: {
      type: 'object',
      properties: {
        amount: {
          type: 'integer',
          minimum: 1,
          maximum: amountMinorMax,
          description: 'leave it out to refund all that is left: null is refused',
        },
      },
      additionalProperties: false,
    },
    CancelRequest: {
      type: 'object',
      description: 'a cancel takes no parameters: send no body, or `{}`',
      additionalProperties: false,
      maxProperties: 0,
    },
  };
}

export const ref = (name: string): JsonSchema => ({ $ref: `#/components/schemas/${name}` });

const problemResponse = (description: string): JsonSchema => ({
  description,
  content: { 'application/problem+json': { schema: ref('Problem') } },
});

/** Responses every authenticated route can give. */
export const commonProblems: Record<string, JsonSchema> = {
  400: problemResponse('malformed request: `errors` names each offending field'),
  401: problemResponse('missing, unknown, revoked or expired API key, or (a key that requires signatures) a missing or bad RFC 9421 signature: `detail` names what failed'),
  429: problemResponse(
    'over the key\'s or the tenant\'s request rate (`rate_limited`) or open holds (`open_holds_exceeded`), or, for a request ' +
      'whose key has not authenticated lately (none, a bad one, a first use), over its source address\'s rate (`scope: address`); nothing was recorded. ' +
      'Retry after `Retry-After` seconds; `RateLimit-Policy` and `RateLimit` give the limits and what is left',
  ),
  503: problemResponse('Temporal or PostgreSQL unreachable: retry after `Retry-After` seconds with the same idempotency key'),
};

/** What a route only admin keys may call answers an agent key, before the body is read. */
export const adminOnlyProblems: Record<string, JsonSchema> = {
  403: problemResponse('an agent key: only admin keys may do this (`forbidden`; `detail` names the rule, `operation` the operation); nothing was recorded'),
};

/** What a route that reads a body can refuse before it parses it. */
export const bodyProblems: Record<string, JsonSchema> = {
  413: problemResponse('the body is larger than the API accepts; nothing was read or recorded'),
  415: problemResponse('the body is not `application/json`; nothing was read or recorded'),
};

/** Path parameter schemas: what the route accepts, so a schema-driven client knows what it may send. */
export const pathParameterSchemas = {
  idempotencyKey: {
    type: 'string',
    minLength: 1,
    maxLength: limits.idempotencyKeyMaxLength,
    pattern: '^[\\x21-\\x7e]{1,255}$',
  },
  accountId: { type: 'string', minLength: 1, maxLength: limits.accountIdMaxLength, pattern: limits.accountIdPattern.source },
} as const;

/** Free text in a query parameter: the contract's text rules. */
export const singleLineText = (maxLength: number, description?: string): JsonSchema => ({
  type: 'string',
  minLength: 1,
  maxLength,
  pattern: textPatterns.singleLine,
  ...(description ? { description } : {}),
});

const methodNotAllowed = problemResponse(
  'the path exists but not with this method; the `Allow` header lists the methods it takes',
);

export function problemResponses(codes: Record<number, string>): Record<string, JsonSchema> {
  return Object.fromEntries(Object.entries(codes).map(([code, description]) => [code, problemResponse(description)]));
}

export function jsonResponse(description: string, schemaName: string, headers: Record<string, JsonSchema> = {}): JsonSchema {
  return { description, headers, content: { 'application/json': { schema: ref(schemaName) } } };
}

export const replayHeaders: Record<string, JsonSchema> = {
  'Idempotent-Replayed': {
    description: '"true" when this response repeats the outcome of an earlier request with the same key',
    schema: { type: 'string', enum: ['true'] },
  },
};

export const idempotencyKeyParameter = (required: boolean, description: string): JsonSchema => ({
  type: 'object',
  properties: { 'idempotency-key': { ...pathParameterSchemas.idempotencyKey, description } },
  ...(required ? { required: ['idempotency-key'] } : {}),
});

/**
 * A create's Idempotency-Key, or instead a server-issued Idempotency-Token (never both). OpenAPI
 * cannot say "one of these two headers", so the key stays marked required, as it is for every
 * caller that makes its own keys, and both descriptions state the alternative.
 */
export const idempotencyKeyOrTokenParameters = (description: string): JsonSchema => {
  const key = idempotencyKeyParameter(true, `${description}; or leave it out and send Idempotency-Token`) as {
    properties: Record<string, JsonSchema>;
  };
  return {
    ...key,
    properties: {
      ...key.properties,
      'idempotency-token': {
        type: 'string',
        minLength: idempotencyTokenLength,
        maxLength: idempotencyTokenLength,
        pattern: idempotencyTokenPattern.source,
        description:
          'instead of Idempotency-Key: a token from POST /v1/idempotency-tokens. Its first use makes it this ' +
          "charge's key; repeats replay the charge. Unknown, another tenant's, or expired before its first use: 400",
      },
    },
  };
};

export async function registerOpenApi(app: FastifyInstance, options: { amountMinorMax: number; version: string }): Promise<void> {
  const schemas = componentSchemas(options.amountMinorMax);
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'chargeguard',
        version: options.version,
        description:
          'Exactly-once charges for automated agents. Every POST that creates something takes an ' +
          '`Idempotency-Key`: reuse it verbatim on every retry of the same request, and the request runs once.\n\n' +
          'What is refused, before anything is recorded or started: text that is not valid Unicode (lone ' +
          'surrogates) or holds control characters (a description may hold tab and line breaks), or exceeds its ' +
          'stated length (counted in characters); unknown body fields and query parameters; `null` where a value ' +
          'or nothing is expected (leave a field out for its default). Each is a 400 problem document whose ' +
          '`errors` name the fields. A known path asked with another method answers 405 with an `Allow` header; ' +
          'a body that is too large answers 413, one that is not `application/json` 415.',
      },
      components: {
        securitySchemes: { apiKey: { type: 'http', scheme: 'bearer', description: 'a key from `chargeguard api-keys create`' } },
      },
      security: [{ apiKey: [] }],
    },
    // Routes carry OpenAPI response objects (with content types and headers) rather than bare
    // JSON Schemas, and the component schemas are added whole.
    transformObject: (documentObject) => {
      if (!('openapiObject' in documentObject)) return documentObject.swaggerObject;
      const document = documentObject.openapiObject as { components?: { schemas?: Record<string, unknown> } };
      document.components = {
        ...document.components,
        schemas: { ...document.components?.schemas, ...schemas },
        responses: { ...(document.components as { responses?: Record<string, unknown> } | undefined)?.responses, MethodNotAllowed: methodNotAllowed },
      } as typeof document.components;
      return documentObject.openapiObject;
    },
  });
  await app.register(swaggerUi, { routePrefix: '/docs', uiConfig: { url: '/openapi.json' } });
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  refuseOtherMethods(app, '/openapi.json', ['GET']);
}
