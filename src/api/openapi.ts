import type { FastifyInstance } from 'fastify';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { z } from 'zod';
import { createAccountBodySchema, depositBodySchema } from '../service/accounts-service.js';
import { chargeRequestSchema } from '../service/validation.js';
import { limits, textPatterns } from '../domain/limits.js';
import { webhookMaxSignatures, webhookSignatureHeader } from '../domain/webhook-signature.js';
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

/**
 * The page parameters every list takes (service/validation.ts, parsePageQuery): `limit`, and one
 * cursor, an object of this list named by its id (`cursorDescription` says which ids).
 */
export function pageQueryProperties(cursorDescription: string): Record<string, JsonSchema> {
  const cursor = { ...pathParameterSchemas.idempotencyKey };
  return {
    limit: { type: 'integer', minimum: limits.listLimitMin, maximum: limits.listLimitMax, default: limits.listLimitDefault },
    starting_after: {
      ...cursor,
      description: `the next page: the objects after this one (${cursorDescription}); an id that names no object of this list is a 400`,
    },
    ending_before: {
      ...cursor,
      description: `the previous page: the objects just before this one (${cursorDescription}); not with starting_after`,
    },
  };
}

/** A page of a list: `object: "list"`, `data`, `has_more`, `url` (the list's path). */
export function listResponse(description: string, itemSchemaName: string): JsonSchema {
  return {
    description,
    content: {
      'application/json': {
        schema: {
          type: 'object',
          properties: {
            object: { const: 'list' },
            data: { type: 'array', items: ref(itemSchemaName) },
            has_more: { type: 'boolean', description: 'more objects lie beyond this page, in the direction it was read' },
            url: { type: 'string', description: 'the list\'s path' },
          },
          required: ['object', 'data', 'has_more', 'url'],
        },
      },
    },
  };
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

/** What the key and the token each say of the other: OpenAPI cannot require one of two headers. */
export const oneOfKeyOrToken = 'One of Idempotency-Key and Idempotency-Token is required (not both)';

/**
 * A create's Idempotency-Key, or instead a server-issued Idempotency-Token (never both). OpenAPI
 * cannot say "one of these two headers is required", so neither is marked required (marking the key
 * would call every token-only request invalid), and both descriptions state the rule; the route
 * refuses a request with neither or both with a 400 naming them.
 */
export const idempotencyKeyOrTokenParameters = (description: string): JsonSchema => {
  const key = idempotencyKeyParameter(false, `${oneOfKeyOrToken}. The key: ${description}`) as {
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
          `${oneOfKeyOrToken}. The token, instead of Idempotency-Key: one from POST /v1/idempotency-tokens. Its first use makes it this ` +
          "charge's key; repeats replay the charge. Unknown, another tenant's, or expired before its first use: 400",
      },
    },
  };
};

/**
 * `Chargeguard-Signature` in the form to send: `t` (unix seconds) first, then one `v1` per secret
 * (at most webhookMaxSignatures). The parser (src/domain/webhook-signature.ts) also skips other
 * schemes and tolerates another order and spaces; what it refuses never matches this.
 */
export const webhookSignatureHeaderPattern =
  `^t=[0-9]{1,12},v1=[0-9a-fA-F]{64}(,v1=[0-9a-fA-F]{64}){0,${webhookMaxSignatures - 1}}$`;

const jsonRpcError = (description: string): JsonSchema => ({
  description,
  content: {
    'application/json': {
      schema: {
        type: 'object',
        properties: {
          jsonrpc: { const: '2.0' },
          error: { type: 'object', properties: { code: { type: 'integer' }, message: { type: 'string' } }, required: ['code', 'message'] },
          id: {},
        },
        required: ['jsonrpc', 'error'],
      },
    },
  },
});

/**
 * What POST /mcp answers: the MCP SDK's transport answers the protocol's own cases (JSON-RPC in
 * application/json), the API's hooks before it the authentication and limits (problem documents).
 */
export const mcpResponses: Record<string, JsonSchema> = {
  200: { description: 'the JSON-RPC response (enableJsonResponse: JSON, never an event stream)', content: { 'application/json': { schema: { type: 'object' } } } },
  202: { description: 'notifications or responses only: accepted, nothing to answer' },
  400: jsonRpcError('not a JSON-RPC message, or a batch over mcpBatchMaxCalls (nothing in it was run)'),
  401: commonProblems[401]!,
  403: problemResponse('an `Origin` not allowed by MCP_ALLOWED_ORIGINS'),
  406: jsonRpcError('`Accept` must list both application/json and text/event-stream (the streamable HTTP transport)'),
  429: commonProblems[429]!,
};

/**
 * Facts of the program the route schemas cannot state, or that routes registered elsewhere leave
 * out, applied to the generated document:
 * - POST /v1/idempotency-tokens takes no body or `{}` (fastify-swagger marks every body required);
 * - POST /mcp answers more than 200 (mcpResponses);
 * - the payload codec (/codec/encode, /codec/decode) is hidden, both methods: it is Temporal's
 *   remote-codec protocol for the Web UI and CLI, behind its own token (CHARGEGUARD_CODEC_TOKEN),
 *   not an API key, and served only when configured; its POSTs were hidden, its CORS preflights not,
 *   so the document listed OPTIONS routes under the API-key lock and none of the real ones;
 * - the webhook signature header has the pattern of webhookSignatureHeaderPattern.
 */
export function amendDocument(document: { paths?: Record<string, Record<string, any>> }): void {
  const paths = document.paths ?? {};
  for (const path of Object.keys(paths)) if (path.startsWith(codecPathPrefix)) delete paths[path];
  const issueToken = paths['/v1/idempotency-tokens']?.post;
  if (issueToken?.requestBody) issueToken.requestBody.required = false;
  const mcp = paths['/mcp']?.post;
  if (mcp) mcp.responses = mcpResponses;
  for (const operation of Object.values(paths['/v1/webhooks/{provider}'] ?? {})) {
    for (const parameter of operation.parameters ?? []) {
      if (parameter.in === 'header' && parameter.name === webhookSignatureHeader.toLowerCase()) {
        parameter.schema = { ...parameter.schema, pattern: webhookSignatureHeaderPattern };
      }
    }
  }
}

const codecPathPrefix = '/codec/';

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
          '`Idempotency-Key`: reuse it verbatim on every retry of the same request, and the request runs once ' +
          '(a charge may instead take a server-issued `Idempotency-Token`: one of the two).\n\n' +
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
      amendDocument(document as Parameters<typeof amendDocument>[0]);
      return documentObject.openapiObject;
    },
  });
  await app.register(swaggerUi, { routePrefix: '/docs', uiConfig: { url: '/openapi.json' } });
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  refuseOtherMethods(app, '/openapi.json', ['GET']);
}
