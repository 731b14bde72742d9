import type { FastifyInstance } from 'fastify';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import { z } from 'zod';
import { createAccountBodySchema, depositBodySchema } from '../service/accounts-service.js';
import { chargeRequestSchema, defaultProviderName } from '../service/validation.js';
import { limits, textPatterns } from '../domain/limits.js';
import { webhookMaxSignatures, webhookSignatureHeader } from '../domain/webhook-signature.js';
import { refuseOtherMethods } from './routes/method-not-allowed.js';
import { wireAccountSchema, wireChargeSchema, wireDepositSchema, wireRefundSchema } from '../service/wire.js';
import { wireProblemSchema } from '../http/problem.js';
import { wireEventSchema } from '../service/events.js';
import {
  createWebhookEndpointBodySchema,
  redeliverBodySchema,
  rotateWebhookSecretBodySchema,
  updateWebhookEndpointBodySchema,
  wireDeliveryAttemptSchema,
  wireRedeliverySchema,
  wireWebhookEndpointSchema,
  wireWebhookEndpointWithSecretSchema,
} from '../service/webhook-endpoints.js';
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

/**
 * What JSON Schema cannot say about a number in a request: `"type": "integer"` accepts `32.0` and
 * `3.2e1`, the strict JSON decoder (src/support/strict-json.ts) refuses them, so every integer field
 * a request takes says so in words.
 */
export const integerWrittenAsOne =
  'Written as an integer literal: a fraction or exponent (`32.0`, `3.2e1`) is refused with 400 naming the field, ' +
  'though JSON Schema counts such numbers as integers; numbers are never rounded.';

/** An amount a request takes: what it counts, its bounds, and how it must be written. */
export const amountMinorDescription = (amountMinorMax: number, what: string): string =>
  `${what} An integer in the currency's minor unit (cents for USD: 2500 is $25.00), from 1 to ${amountMinorMax} ` +
  `(CHARGE_AMOUNT_MINOR_MAX). ${integerWrittenAsOne}`;

/** A component schema with a property's description replaced (the zod schemas say less, or other things, to the MCP tools). */
function describeProperty(schema: JsonSchema, property: string, description: string): JsonSchema {
  const properties = schema.properties as Record<string, JsonSchema>;
  return { ...schema, properties: { ...properties, [property]: { ...properties[property], description } } };
}

/**
 * The create-charge body: the fields, and who pays as a oneOf of the two shapes, each naming the
 * payer field it requires and forbidding the other. Schema-driven clients (openapi-typescript)
 * turn this into a union of two object types; validators judge it as the program does.
 */
function createChargeRequestSchema(amountMinorMax: number): JsonSchema {
  const { oneOf: _presenceOnly, ...base } = jsonSchema(chargeRequestSchema(amountMinorMax), 'input') as JsonSchema & { oneOf?: unknown };
  const described = describeProperty(
    describeProperty(base, 'amount', amountMinorDescription(amountMinorMax, 'What the payer pays.')),
    'capture',
    '"automatic" (the default: leave it out) captures at once; "manual" reserves the amount until POST /v1/charges/{key}/capture or cancel, or until the hold expires',
  );
  const properties = described.properties as Record<string, JsonSchema>;
  // `false`: the field must be absent. Generators read it as `never`, so the two branches become a
  // union in which setting both payer fields does not type-check.
  return {
    ...described,
    oneOf: [
      {
        title: 'LedgerPayer',
        description: 'a ledger account pays: payer_account_id, and neither payment_method nor provider',
        type: 'object',
        properties: { payer_account_id: properties.payer_account_id, payment_method: false, provider: false },
        required: ['payer_account_id'],
      },
      {
        title: 'ProviderPayer',
        description: `the payer pays through a provider: payment_method (and provider, default "${defaultProviderName}"), no payer_account_id`,
        type: 'object',
        properties: { payment_method: properties.payment_method, provider: properties.provider, payer_account_id: false },
        required: ['payment_method'],
      },
    ],
  };
}

export function componentSchemas(amountMinorMax: number): Record<string, JsonSchema> {
  const deposit = jsonSchema(depositBodySchema(amountMinorMax), 'input');
  const token = jsonSchema(issueTokenBodySchema, 'input');
  const tokenTtl = ((token.properties as Record<string, JsonSchema>).ttl_seconds ?? {}).description as string | undefined;
  return {
    Charge: jsonSchema(wireChargeSchema, 'output'),
    Account: jsonSchema(wireAccountSchema, 'output'),
    Deposit: jsonSchema(wireDepositSchema, 'output'),
    Refund: jsonSchema(wireRefundSchema, 'output'),
    Event: jsonSchema(wireEventSchema, 'output'),
    Problem: jsonSchema(wireProblemSchema, 'output'),
    CreateChargeRequest: createChargeRequestSchema(amountMinorMax),
    CreateAccountRequest: jsonSchema(createAccountBodySchema(), 'input'),
    DepositRequest: describeProperty(
      {
        ...describeProperty(deposit, 'amount', amountMinorDescription(amountMinorMax, 'What the account receives.')),
        description:
          'Exactly once per Idempotency-Key header or per `external_id`: one of the two is required. When both are given they ' +
          'must be equal, else 400 naming both. (JSON Schema cannot relate a header to a body field: the rule is stated here and ' +
          'on the Idempotency-Key parameter.)',
      },
      'external_id',
      "the payment provider's id for this deposit, so a redelivered webhook deposits once: it then serves as the deposit's " +
        'idempotency key (send no Idempotency-Key, or one equal to it)',
    ),
    IdempotencyToken: jsonSchema(wireIdempotencyTokenSchema, 'output'),
    IssueIdempotencyTokenRequest: describeProperty(token, 'ttl_seconds', `${tokenTtl ?? 'seconds'}. ${integerWrittenAsOne}`),
    CaptureRequest: {
      type: 'object',
      properties: {
        amount: {
          type: 'integer',
          minimum: 1,
          maximum: amountMinorMax,
          description: amountMinorDescription(
            amountMinorMax,
            'Capture less than authorised; the rest is released. Leave it out to capture all: null is refused.',
          ),
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
          description: amountMinorDescription(amountMinorMax, 'Leave it out to refund all that is left: null is refused.'),
        },
      },
      additionalProperties: false,
    },
    WebhookEndpoint: jsonSchema(wireWebhookEndpointSchema, 'output'),
    WebhookEndpointWithSecret: jsonSchema(wireWebhookEndpointWithSecretSchema, 'output'),
    WebhookDeliveryAttempt: jsonSchema(wireDeliveryAttemptSchema, 'output'),
    WebhookDelivery: jsonSchema(wireRedeliverySchema, 'output'),
    WebhookEndpointSecret: {
      type: 'object',
      properties: {
        object: { const: 'webhook_endpoint_secret' },
        endpoint_id: { type: 'string' },
        secret: { type: 'string', description: 'the new signing secret (`whsec_` + base64), shown this once' },
        previous_secrets_expire_at: { type: 'string', description: 'RFC 3339 timestamp (UTC): until then the previous secrets sign too' },
      },
      required: ['object', 'endpoint_id', 'secret', 'previous_secrets_expire_at'],
    },
    DeletedWebhookEndpoint: {
      type: 'object',
      properties: { id: { type: 'string' }, object: { const: 'webhook_endpoint' }, deleted: { const: true } },
      required: ['id', 'object', 'deleted'],
    },
    CreateWebhookEndpointRequest: jsonSchema(createWebhookEndpointBodySchema, 'input'),
    UpdateWebhookEndpointRequest: jsonSchema(updateWebhookEndpointBodySchema, 'input'),
    RotateWebhookSecretRequest: describeProperty(
      jsonSchema(rotateWebhookSecretBodySchema, 'input'),
      'overlap_seconds',
      `${(jsonSchema(rotateWebhookSecretBodySchema, 'input').properties as Record<string, JsonSchema>).overlap_seconds!.description as string}. ${integerWrittenAsOne}`,
    ),
    RedeliverRequest: jsonSchema(redeliverBodySchema, 'input'),
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
export const oneOfKeyOrToken =
  'One of Idempotency-Key and Idempotency-Token is required (not both): neither, or both, is refused with 400 naming them. ' +
  'OpenAPI cannot require one of two headers (oneOf applies to schemas, not parameters), so neither is marked required';

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
  415: jsonRpcError('`Content-Type` must be application/json'),
  429: commonProblems[429]!,
};

/**
 * Facts of the program the route schemas cannot state, or that routes registered elsewhere leave
 * out, applied to the generated document:
 * - POST /v1/idempotency-tokens, cancel, capture and refund take no body or `{}` (fastify-swagger marks every body required);
 * - POST /mcp answers more than 200 (mcpResponses);
 * - the payload codec (/codec/encode, /codec/decode) is hidden, both methods: it is Temporal's
 *   remote-codec protocol for the Web UI and CLI, behind its own token (CHARGEGUARD_CODEC_TOKEN),
 *   not an API key, and served only when configured; its POSTs were hidden, its CORS preflights not,
 *   so the document listed OPTIONS routes under the API-key lock and none of the real ones;
 * - the webhook signature header has the pattern of webhookSignatureHeaderPattern.
 */
export function amendDocument(document: { paths?: Record<string, Record<string, any>> }): void {
  const paths = document.paths ?? {};
  for (const [path, operations] of Object.entries(paths)) {
    for (const [method, operation] of Object.entries(operations)) {
      const operationId = operationIds[`${method} ${path}`];
      if (operationId === undefined) continue;
      operation.operationId = operationId;
      applyExample(operation, requestExamples[operationId]);
      const note = parameterNotes[operationId];
      for (const parameter of operation.parameters ?? []) {
        if (note?.[parameter.name] !== undefined) parameter.description = note[parameter.name];
      }
    }
  }
  for (const operations of Object.values(paths)) {
    for (const operation of Object.values(operations)) requireListFields(operation);
  }
  const mcpOperation = paths['/mcp']?.post;
  if (mcpOperation) {
    mcpOperation.description = mcpDescription;
    // The route takes its body unvalidated (the transport judges it), so fastify-swagger lists none.
    mcpOperation.requestBody = {
      required: true,
      content: {
        'application/json': {
          schema: { description: 'a JSON-RPC 2.0 message (an object) or a batch of them (an array)', type: ['object', 'array'] },
          example: requestExamples.mcp?.body,
        },
      },
    };
  }
  for (const path of Object.keys(paths)) if (path.startsWith(codecPathPrefix)) delete paths[path];
  // Bodies whose every field is optional may be left out entirely (the route reads no body as `{}`):
  // fastify-swagger marks every body required, which a fuzzer found untrue of these four.
  for (const [path, method] of optionalBodies) {
    const operation = paths[path]?.[method];
    if (operation?.requestBody) operation.requestBody.required = false;
  }
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

/** Operations whose body is optional: none is read as `{}` (no amount: all of it; no ttl: the default). */
const optionalBodies: Array<[string, string]> = [
  ['/v1/idempotency-tokens', 'post'],
  ['/v1/charges/{key}/cancel', 'post'],
  ['/v1/charges/{key}/capture', 'post'],
  ['/v1/charges/{key}/refunds', 'post'],
  ['/v1/webhook-endpoints/{id}/rotate-secret', 'post'],
];

/**
 * Each operation's stable name (`<method> <path>` as the document spells it): what generated
 * clients name their functions, so renaming one breaks callers. A route added without an entry
 * here has no operationId, which test/api-openapi.test.ts refuses.
 */
export const operationIds: Record<string, string> = {
  'get /healthz': 'getHealth',
  'get /readyz': 'getReadiness',
  'get /metrics': 'getMetrics',
  'post /v1/webhooks/{provider}': 'receiveWebhook',
  'post /v1/provider-events/{provider}': 'receiveProviderEvent',
  'post /v1/charges': 'createCharge',
  'get /v1/charges': 'listCharges',
  'get /v1/charges/{key}': 'getCharge',
  'post /v1/charges/{key}/cancel': 'cancelCharge',
  'post /v1/charges/{key}/capture': 'captureCharge',
  'post /v1/idempotency-tokens': 'createIdempotencyToken',
  'post /v1/charges/{key}/refunds': 'createRefund',
  'get /v1/charges/{key}/refunds': 'listRefunds',
  'get /v1/charges/{key}/refunds/{refundKey}': 'getRefund',
  'get /v1/refunds': 'listTenantRefunds',
  'get /v1/accounts': 'listAccounts',
  'post /v1/accounts': 'createAccount',
  'get /v1/accounts/{id}': 'getAccount',
  'post /v1/accounts/{id}/deposits': 'createDeposit',
  'post /v1/webhook-endpoints': 'createWebhookEndpoint',
  'get /v1/webhook-endpoints': 'listWebhookEndpoints',
  'get /v1/webhook-endpoints/{id}': 'getWebhookEndpoint',
  'post /v1/webhook-endpoints/{id}': 'updateWebhookEndpoint',
  'delete /v1/webhook-endpoints/{id}': 'deleteWebhookEndpoint',
  'post /v1/webhook-endpoints/{id}/rotate-secret': 'rotateWebhookEndpointSecret',
  'get /v1/webhook-endpoints/{id}/deliveries': 'listWebhookDeliveryAttempts',
  'post /v1/webhook-endpoints/{id}/deliveries': 'redeliverWebhookEvent',
  'get /v1/events': 'listEvents',
  'get /v1/events/{id}': 'getEvent',
  'post /mcp': 'mcp',
};

/** The id the webhook endpoint examples name (a real one is the server's: `we_` and 24 letters or digits). */
export const exampleEndpointId = 'we_0123456789ABCDEFGHIJabcd';

interface RequestExample {
  /** By parameter name as the document spells it (header names lower case). */
  parameters?: Record<string, string | number>;
  body?: unknown;
}

/**
 * The example of each operation that takes input: what Swagger UI's "Try it out" sends, and
 * what schema fuzzers send first. They follow docs/api.md, "Fund an account and charge it with
 * curl", so each succeeds on `npm start` once that walk-through's accounts exist (payer and
 * payee, USD, payer funded): the create-charge example is its charge (a replay answers 200), the
 * refund refunds part of it. Cancel and capture name charges made with `"capture": "manual"`
 * (order-1002, order-1003), as their parameter descriptions say. test/api-openapi-examples.test.ts
 * sends every one of them to a real app and expects 2xx.
 */
export const requestExamples: Record<string, RequestExample> = {
  createAccount: { parameters: { 'idempotency-key': 'open-payer' }, body: { id: 'payer', currency: 'USD' } },
  getAccount: { parameters: { id: 'payer' } },
  createDeposit: { parameters: { id: 'payer', 'idempotency-key': 'top-up-1' }, body: { amount: 10000 } },
  createCharge: {
    parameters: { 'idempotency-key': 'order-1001' },
    body: { order_id: '1001', payer_account_id: 'payer', payee_account_id: 'payee', amount: 2500, currency: 'USD' },
  },
  getCharge: { parameters: { key: 'order-1001' } },
  listCharges: { parameters: { payer_account_id: 'payer', limit: 10 } },
  cancelCharge: { parameters: { key: 'order-1002' }, body: {} },
  captureCharge: { parameters: { key: 'order-1003' }, body: { amount: 2000 } },
  createRefund: { parameters: { key: 'order-1001', 'idempotency-key': 'refund-1001-1' }, body: { amount: 500 } },
  listRefunds: { parameters: { key: 'order-1001' } },
  listTenantRefunds: { parameters: { limit: 10 } },
  listAccounts: { parameters: { limit: 10 } },
  getRefund: { parameters: { key: 'order-1001', refundKey: 'refund-1001-1' } },
  createIdempotencyToken: { body: { ttl_seconds: 900 } },
  listEvents: { parameters: { type: 'charge.succeeded', limit: 10 } },
  // A placeholder of an event id's shape: ids are random, so take one from listEvents (its description says so).
  getEvent: { parameters: { id: 'evt_0123456789abcdef0123456789abcdef' } },
  mcp: { body: { jsonrpc: '2.0', id: 1, method: 'tools/list' } },
  // The endpoint examples name one endpoint id; test/api-openapi-examples.test.ts puts the id its
  // createWebhookEndpoint example made in its place (an id is the server's, no example can know it).
  createWebhookEndpoint: {
    parameters: { 'idempotency-key': 'register-order-fulfilment' },
    body: { url: 'https://hooks.example.com/chargeguard', enabled_events: ['charge.succeeded', 'refund.succeeded'], description: 'order fulfilment' },
  },
  listWebhookEndpoints: { parameters: { limit: 10 } },
  getWebhookEndpoint: { parameters: { id: exampleEndpointId } },
  updateWebhookEndpoint: { parameters: { id: exampleEndpointId }, body: { enabled_events: ['*'] } },
  rotateWebhookEndpointSecret: { parameters: { id: exampleEndpointId }, body: { overlap_seconds: 3600 } },
  listWebhookDeliveryAttempts: { parameters: { id: exampleEndpointId, limit: 10 } },
  redeliverWebhookEvent: { parameters: { id: exampleEndpointId }, body: { event: 'evt_0123456789abcdef0123456789abcdef' } },
  deleteWebhookEndpoint: { parameters: { id: exampleEndpointId } },
};

/** The cancel and capture examples' charges: made with manual capture, as the walk-through's charge is not. */
const manualChargeNote = (key: string, what: string): string =>
  `the idempotency key the charge was created with (percent-encoded). The example, ${key}, names a charge created with ` +
  `"capture": "manual" (${what})`;

/** Parameter descriptions that say more than the route's own (by operationId, then parameter name). */
const parameterNotes: Record<string, Record<string, string>> = {
  getEvent: { id: "an event's id, evt_… (from GET /v1/events or a delivery's webhook-id). The example shows only its shape: event ids are random" },
  cancelCharge: { key: manualChargeNote('order-1002', 'a succeeded charge cannot be cancelled: 409') },
  captureCharge: { key: manualChargeNote('order-1003', 'an automatic one is captured already: 409') },
  createDeposit: {
    'idempotency-key':
      'Exactly one deposit per key. Required unless the body carries `external_id`; when both are given they must be ' +
      'equal (else 400 naming both). OpenAPI cannot make a header required only when a body field is absent: the rule is ' +
      'stated here and on DepositRequest.',
  },
};

const mcpDescription =
  'The Model Context Protocol over streamable HTTP (stateless; JSON answers, never an event stream). The request must ' +
  'send `Accept: application/json, text/event-stream` (both media types, as the transport requires; else 406) and ' +
  '`Content-Type: application/json`. OpenAPI ignores Accept when declared as a header parameter, so the rule is stated here. ' +
  'The body is a JSON-RPC 2.0 message or a batch; the tools are those of docs/api.md, "Connect an MCP client".';

/** A list page always carries `object`, `data` and `has_more`: say so, so a typed client need not test for them. */
function requireListFields(operation: Record<string, any>): void {
  for (const response of Object.values<any>(operation.responses ?? {})) {
    const schema = response?.content?.['application/json']?.schema;
    const list = schema?.properties?.object;
    if ((list?.const === 'list' || (list?.enum?.length === 1 && list.enum[0] === 'list')) && schema.required === undefined) {
      schema.required = Object.keys(schema.properties).filter((name) => ['object', 'data', 'has_more'].includes(name));
    }
  }
}

function applyExample(operation: Record<string, any>, example: RequestExample | undefined): void {
  if (example === undefined) return;
  for (const parameter of operation.parameters ?? []) {
    const value = example.parameters?.[parameter.name];
    if (value !== undefined) parameter.example = value;
  }
  const media = operation.requestBody?.content?.['application/json'];
  if (example.body !== undefined && media) media.example = example.body;
}

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
