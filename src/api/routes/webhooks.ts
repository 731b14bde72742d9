import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { webhookMaxSignatures, webhookSignatureHeader, webhookToleranceSeconds } from '../../domain/webhook-signature.js';
import { providerPattern } from '../../domain/identifiers.js';
import { depositSucceededSchema, wireWebhookReceiptSchema } from '../../service/webhooks.js';
import type { ApiDeps } from '../deps.js';
import { webhookRateLimitHook } from '../../http/rate-limit-hook.js';
import { bodyProblems, problemResponses } from '../openapi.js';
import { refuseOtherMethods } from './method-not-allowed.js';

const webhookUrl = '/v1/webhooks/:provider';

function jsonSchemaOf(schema: z.ZodType, io: 'input' | 'output'): Record<string, unknown> {
  const { $schema: _dialect, ...rest } = z.toJSONSchema(schema, { target: 'draft-2020-12', io, unrepresentable: 'any' }) as Record<string, unknown>;
  return rest;
}

/**
 * POST /v1/webhooks/{provider}: a payment provider's signed callback (docs/webhooks.md). Not
 * authenticated by an API key, so it lives in its own plugin scope, outside the tenant scope and
 * its key hook; the signature is the authentication. The scope has its own JSON parser that keeps
 * the body's bytes as they arrived, because the signature covers those bytes and any
 * re-serialisation (key order, spacing, escapes) would not verify. The app-wide parser is untouched.
 * The bytes become a value only once the signature verifies, in the service, through the same
 * strict decoder as every other JSON body (src/support/strict-json.ts).
 */
export async function registerWebhookRoutes(app: FastifyInstance, deps: ApiDeps): Promise<void> {
  const { webhooks } = deps.context;
  const bodyLimitBytes = app.initialConfig.bodyLimit;

  await app.register(async (webhookScope) => {
    webhookScope.removeAllContentTypeParsers();
    webhookScope.addContentTypeParser('application/json', { parseAs: 'buffer', bodyLimit: bodyLimitBytes }, (_request, body, done) => {
      done(null, body);
    });
    // A 401 here is about the signature, not a bearer token: say which scheme the caller needs.
    webhookScope.addHook('onSend', async (_request, reply, payload) => {
      if (reply.hasHeader('www-authenticate')) reply.header('www-authenticate', `${webhookSignatureHeader} realm="chargeguard-webhooks"`);
      return payload;
    });
    // Per source address, then per provider (docs/limits.md): before the body is read, so a refused
    // delivery costs no HMAC and no read of the provider's secrets.
    webhookScope.addHook('onRequest', webhookRateLimitHook(deps.context));
    refuseOtherMethods(webhookScope, webhookUrl, ['POST']);

    webhookScope.post<{ Params: { provider: string }; Body: Buffer | undefined }>(
      webhookUrl,
      {
        schema: {
          summary: "Receive a payment provider's signed callback, which credits an account exactly once",
          description:
            `No API key: the \`${webhookSignatureHeader}\` header authenticates the call. It is ` +
            '`t=<unix seconds>,v1=<hex HMAC-SHA256>` (up to ' +
            `${webhookMaxSignatures} v1 entries; any one valid is enough), the HMAC computed with one of the provider's ` +
            'secrets (`chargeguard webhook-secrets add <provider>`) over `<t>.<raw body>`, the body\'s bytes exactly as sent. ' +
            `\`t\` must be within ${webhookToleranceSeconds} s of the server's clock, either way.\n\n` +
            '`deposit.succeeded` credits `data.amount_minor` to `data.account_id` of `data.tenant`, once per provider and ' +
            'event `id` across all tenants: every redelivery answers 200 with the first delivery\'s result and ' +
            '`Idempotent-Replayed: true`. Any other `type` is acknowledged with 200 `status: "ignored"` and not recorded. ' +
            'Every refusal writes nothing.',
          tags: ['webhooks'],
          security: [],
          params: {
            type: 'object',
            properties: {
              provider: {
                type: 'string',
                minLength: 1,
                maxLength: 32,
                pattern: providerPattern.source,
                description: 'the provider, as its secrets are named',
              },
            },
            required: ['provider'],
          },
          headers: {
            type: 'object',
            properties: {
              'chargeguard-signature': {
                type: 'string',
                description: 't=<unix seconds>,v1=<64 hex digits>[,v1=…]',
                examples: ['t=1764000000,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd'],
              },
            },
            required: ['chargeguard-signature'],
          },
          body: {
            ...jsonSchemaOf(depositSucceededSchema(deps.context.config.CHARGE_AMOUNT_MINOR_MAX), 'input'),
            description: 'a deposit.succeeded event; an event of any other type needs only `id`, `type` and an object `data`',
          },
          response: {
            200: {
              description: 'credited (now, or by an earlier delivery of this event: then `Idempotent-Replayed: true`), or ignored',
              headers: {
                'Idempotent-Replayed': {
                  description: '"true" when an earlier delivery of this event made the deposit',
                  schema: { type: 'string', enum: ['true'] },
                },
              },
              content: { 'application/json': { schema: jsonSchemaOf(wireWebhookReceiptSchema, 'output') } },
            },
            ...problemResponses({
              400: `malformed ${webhookSignatureHeader} header, body that is not the event (\`errors\` names each field), or a currency other than the account's; nothing was written`,
              401: `no ${webhookSignatureHeader} header, \`t\` outside the tolerance, or no v1 matches a current secret of this provider (an unknown provider answers the same); nothing was written`,
              404: 'no such account for the tenant; nothing was written',
              422: 'the event id was first delivered with another tenant, account, amount or currency: nothing moves again',
              429: 'over the source address\'s or the provider\'s webhook rate (`scope` says which; docs/limits.md), before the signature was checked: nothing was read or written; redeliver after `Retry-After` seconds',
              503: 'PostgreSQL unreachable: nothing was written; redeliver later',
            }),
            ...bodyProblems,
          },
        },
      },
      async (request, reply) => {
        const signature = request.headers[webhookSignatureHeader.toLowerCase()];
        const { receipt, replayed } = await webhooks.receive({
          provider: request.params.provider,
          // Node joins a header sent twice into one value, whose second t= makes it malformed.
          signatureHeader: typeof signature === 'string' ? signature : undefined,
          rawBody: request.body ?? Buffer.alloc(0),
          nowMs: Date.now(),
        });
        if (replayed) reply.header('idempotent-replayed', 'true');
        return reply.code(200).send(receipt);
      },
    );
  });
}
