import type { FastifyInstance } from 'fastify';
import { providerNames } from '../../domain/providers.js';
import type { ProviderConnectors } from '../../providers/connectors.js';
import {
  providerEventActions,
  providerSignatureHeaders,
  providerWebhookSignatures,
  temporalChargeSignaller,
  type SignalCharge,
} from '../../service/provider-events.js';
import type { ApiDeps } from '../deps.js';
import { webhookRateLimitHook } from '../../http/rate-limit-hook.js';
import { bodyProblems, problemResponses } from '../openapi.js';
import { refuseOtherMethods } from './method-not-allowed.js';

const providerEventsUrl = '/v1/provider-events/:provider';

/** Each provider's signature scheme, as its folder declares it, for the route's description. */
const signatureSchemes = providerNames.map((name) => `${providerWebhookSignatures[name].displayName}: ${providerWebhookSignatures[name].checked}`).join('; ');
const signatureHeaderNames = [...new Set(providerNames.map((name) => providerWebhookSignatures[name].name.toLowerCase()))];

/**
 * The signature headers, as each provider declares them. Required when every provider signs in the
 * same header; otherwise which one is required depends on {provider}, and the service refuses a
 * delivery without its provider's header (400 naming it).
 */
const signatureHeadersSchema = {
  type: 'object',
  properties: Object.fromEntries(
    providerNames.map((name) => {
      const header = providerWebhookSignatures[name];
      return [header.name.toLowerCase(), { type: 'string', description: header.description, examples: [header.example] }];
    }),
  ),
  required: signatureHeaderNames.length === 1 ? signatureHeaderNames : [],
};

export interface ProviderEventRouteOptions {
  connectors: ProviderConnectors;
  /** How a running charge workflow is told of an event; Temporal's signal unless a test gives another. */
  signalCharge?: SignalCharge;
}

/**
 * POST /v1/provider-events/{provider}: a payment provider's events about provider charges
 * (docs/providers.md, Webhooks), beside the deposit callbacks of /v1/webhooks/{provider} and
 * separate from them: another signature scheme (the provider's own, verified by its connector with
 * its secrets), another table, another effect. Like them it is authenticated by its signature, not
 * an API key, so it lives outside the tenant scope in a plugin scope of its own whose JSON parser
 * keeps the body's bytes: the signature covers those bytes, not a re-serialisation.
 */
export async function registerProviderEventRoutes(app: FastifyInstance, deps: ApiDeps, options: ProviderEventRouteOptions): Promise<void> {
  const service = deps.context.providerEvents({
    connectors: options.connectors,
    signalCharge: options.signalCharge ?? temporalChargeSignaller(deps.context.temporal),
  });
  const bodyLimitBytes = app.initialConfig.bodyLimit;

  await app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('application/json', { parseAs: 'buffer', bodyLimit: bodyLimitBytes }, (_request, body, done) => {
      done(null, body);
    });
    // The webhook buckets (per source address, then per provider; docs/limits.md), before the body
    // is read: a refused delivery costs no HMAC. The provider's bucket is shared with deposit
    // callbacks of a provider of the same name: one provider, one rate.
    scope.addHook('onRequest', webhookRateLimitHook(deps.context));
    refuseOtherMethods(scope, providerEventsUrl, ['POST']);

    scope.post<{ Params: { provider: string }; Body: Buffer | undefined }>(
      providerEventsUrl,
      {
        schema: {
          summary: "Receive a payment provider's signed event about a provider charge",
          description:
            `No API key: the provider's signature header authenticates the call (${signatureSchemes}) over the body's bytes exactly as sent. ` +
            'Each event id is handled once: a redelivery answers 200 with the first delivery\'s action and `Idempotent-Replayed: true`. ' +
            'While the charge\'s workflow runs it is signalled; once it has closed, a payment held for a cancelled or declined charge is voided. ' +
            'Every refusal writes nothing; a 5xx makes the provider deliver the event again.',
          tags: ['webhooks'],
          security: [],
          params: {
            type: 'object',
            properties: { provider: { type: 'string', enum: [...providerNames], description: 'the provider that sent the event' } },
            required: ['provider'],
          },
          headers: signatureHeadersSchema,
          response: {
            200: {
              description: 'handled (now, or by an earlier delivery of this event: then `Idempotent-Replayed: true`)',
              content: {
                'application/json': {
                  schema: {
                    type: 'object',
                    properties: {
                      object: { const: 'provider_event' },
                      id: { type: 'string', description: "the provider's event id" },
                      provider: { type: 'string' },
                      type: { type: 'string', description: "the provider's event type" },
                      action: { type: 'string', enum: [...providerEventActions], description: 'what the event led to (docs/providers.md, Webhooks)' },
                      replayed: { type: 'boolean' },
                    },
                    required: ['object', 'id', 'provider', 'type', 'action', 'replayed'],
                  },
                },
              },
            },
            ...problemResponses({
              400: `no or a bad signature header (\`errors\` names it and says why: bad_signature, too_old, malformed), or a signed body that is not an event; nothing was written`,
              404: 'no such provider, or none configured in this process; nothing was written',
              429: "over the source address's or the provider's webhook rate (docs/limits.md), before the signature was checked",
              500: 'a fault (a void the provider left unanswered, a bug): nothing was recorded, so the provider delivers the event again',
              503: 'PostgreSQL or Temporal unreachable: nothing was recorded; the provider delivers the event again',
            }),
            ...bodyProblems,
          },
        },
      },
      async (request, reply) => {
        const provider = request.params.provider;
        const headerName = (providerSignatureHeaders as Record<string, string | undefined>)[provider]?.toLowerCase();
        const signature = headerName ? request.headers[headerName] : undefined;
        const receipt = await service.receive(
          {
            provider,
            // Node joins a header sent twice into one value, which then fails to verify.
            signatureHeader: typeof signature === 'string' ? signature : undefined,
            rawBody: request.body ?? Buffer.alloc(0),
            receivedAtMs: Date.now(),
          },
          request.log,
        );
        if (receipt.replayed) reply.header('idempotent-replayed', 'true');
        return reply.code(200).send(receipt);
      },
    );
  });
}
