import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult, ToolAnnotations } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import type { AccountsService } from '../service/accounts-service.js';
import type { ChargeService } from '../service/charge-service.js';
import { assertIdempotencyKey, defaultProviderName, refusingPrototypeKey } from '../service/validation.js';
import { accountToWire, chargeToWire, refundToWire, type WireCharge } from '../service/wire.js';
import { renderEvent } from '../service/events.js';
import { captureModes } from '../domain/capture-modes.js';
import { limits } from '../domain/limits.js';
import { paymentMethodIdMaxLength, providerNames, returnUrlMaxLength } from '../domain/providers.js';
import type { Operation } from '../domain/permissions.js';
import { authorize, chargeActorOf, type Principal } from '../auth/principal.js';
import type { WebhookEndpointsService } from '../service/webhook-endpoints.js';
import { outputSchemas } from './output-schemas.js';
import { registerWebhookEndpointTools, webhookEndpointToolAnnotations } from './webhook-endpoint-tools.js';
import { errorResult, okResult } from './tool-results.js';

export interface McpDeps {
  charges: ChargeService;
  accounts: AccountsService;
  /** The webhook endpoint tools' service (admin keys only: webhook-endpoint-tools.ts). */
  webhookEndpoints: WebhookEndpointsService;
  /**
   * Who each call acts as, asked again on every call: over HTTP the request's (its key was checked
   * by the API's authentication hook); over stdio the key is looked up again each time, so a key
   * revoked mid-session is refused on its next call. Every tool acts for the principal's tenant only.
   */
  principal: () => Promise<Principal>;
  /**
   * A check of the caller's own after the role's, before anything is judged or recorded: over stdio
   * without a key, whether the ledger lets the operator charge and refund in the tenant at all.
   */
  beforeOperation?: (principal: Principal, operation: Operation) => Promise<void>;
  /** How long create_charge waits for the outcome before answering "still processing". */
  waitBudgetMs: number;
  version?: string;
}

const idempotencyKey = z
  .string()
  .describe(
    'Idempotency key of the charge: 1-255 visible ASCII characters you choose once per intended charge ' +
      '(e.g. "order-1234-attempt-1"). REUSE THE SAME KEY when you retry after an error or timeout: that is ' +
      'what makes the retry safe. A new key means a new charge.',
  );

/**
 * What each tool does, as MCP's hints say it (a client may ask before a destructive call, or run a
 * read-only one without asking). Written out in full for every tool, and pinned by
 * test/mcp-tool-schemas.test.ts:
 *
 * - readOnlyHint: changes nothing (get_charge, get_account_balance, list_events).
 * (The webhook endpoint tools' hints are said where they are: webhook-endpoint-tools.ts.)
 * - destructiveHint: may change what already exists for good. cancel_charge releases a hold (and
 *   voids the provider's authorization); capture_charge moves the reserved money and releases what
 *   it does not capture; refund_charge returns money. create_charge only adds a new charge.
 * - idempotentHint: the same call again has no further effect. True for every tool: a charge or a
 *   refund is made once per key, and cancel and capture are no-ops on a charge already there.
 * - openWorldHint: may reach beyond chargeguard's own ledger and Temporal, i.e. to the external
 *   payment provider (Stripe): a charge with payment_method authorizes there, capture and cancel
 *   capture or void that authorization, a refund refunds there. The reads answer from chargeguard's
 *   own records.
 */
export const toolAnnotations = {
  create_charge: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: true },
  get_charge: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  cancel_charge: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: true },
  capture_charge: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: true },
  refund_charge: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: true },
  get_account_balance: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  list_events: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  ...webhookEndpointToolAnnotations,
} as const satisfies Record<string, ToolAnnotations>;

/**
 * Runs one tool call as the principal: who it is and whether its role allows the operation are
 * decided first (src/auth/principal.ts, the same rule as the HTTP routes'), before the service
 * judges the arguments or records anything.
 */
async function run(
  deps: McpDeps,
  operation: Operation,
  body: (tenant: string, principal: Principal) => Promise<CallToolResult>,
): Promise<CallToolResult> {
  try {
    const principal = await deps.principal();
    authorize(principal, operation);
    await deps.beforeOperation?.(principal, operation);
    return await body(principal.tenant, principal);
  } catch (error) {
    const result = errorResult(error);
    // Unexpected failures reach the model only as "internal_error"; the operator needs the cause.
    if ((result.structuredContent as { error: { type: string } }).error.type === 'internal_error') {
      process.stderr.write(`chargeguard MCP tool failed: ${(error as Error).stack ?? String(error)}\n`);
    }
    return result;
  }
}

/** What the model must do with a charge waiting for its payer: the summary says it, not only the structured content. */
function payerActionNote(charge: WireCharge): string {
  if (charge.status !== 'requires_action') return '';
  return ` The payer must act (3-D Secure): hand next_action to the payer (${JSON.stringify(charge.next_action)}), then call get_charge with the same idempotency_key.`;
}

/**
 * The chargeguard tools for one tenant. Argument checks are the service's (one message per
 * field, the same rules as the HTTP API's), so the schemas here state types and meaning for the
 * model; they are strict, so an argument the tool does not take is refused rather than ignored.
 */
export function createMcpServer(deps: McpDeps): McpServer {
  const server = new McpServer(
    { name: 'chargeguard', version: deps.version ?? '0.1.0' },
    {
      instructions:
        'Exactly-once charges. Every charge has an idempotency_key that you choose; when a call fails or times ' +
        'out, call again with the SAME key and the same arguments and you will get the same charge, never a second one.',
    },
  );

  // In the order tools/list has always listed them.
  registerCreateChargeTool(server, deps);
  registerChargeTools(server, deps);
  registerRefundTool(server, deps);
  registerBalanceTool(server, deps);
  registerEventsTool(server, deps);
  registerWebhookEndpointTools(server, deps.webhookEndpoints, (operation, body) => run(deps, operation, body));
  return server;
}

function registerCreateChargeTool(server: McpServer, deps: McpDeps): void {
  const { charges } = deps;
  server.registerTool(
    'create_charge',
    {
      title: 'Create a charge (exactly once per idempotency_key)',
      description:
        'Charges the payer and credits payee_account_id. The payer is EXACTLY ONE of payer_account_id (an account in ' +
        'this ledger) and payment_method (a card or other instrument at a payment provider, e.g. Stripe\'s ' +
        `"pm_card_visa"; \`provider\` defaults to "${defaultProviderName}"). Safe to retry: with the same idempotency_key and ` +
        'arguments it returns the original charge instead of charging again. Amounts are integers in minor units ' +
        '(cents). Status "declined" is a final answer for that key. When `completed` is false the charge is not ' +
        'decided yet: call create_charge again with the same key, or get_charge. Status "requires_action" (completed ' +
        'false) means the payer must authenticate (3-D Secure): hand `next_action` to the payer (with return_url, ' +
        'next_action.redirect_to_url.url is a page the person opens), then call get_charge until it is decided; ' +
        'unanswered, the charge is cancelled when its hold expires.',
      inputSchema: z
        .object({
          idempotency_key: idempotencyKey,
          order_id: z.string().describe(`your order or invoice id (1-${limits.orderIdMaxLength} characters, no control characters)`),
          payer_account_id: z.string().optional().describe('account to debit; give this or payment_method, not both'),
          payment_method: z
            .string()
            .optional()
            .describe(
              `the payer's instrument at the provider (Stripe: a PaymentMethod id such as "pm_card_visa"; letters, digits and "_", ` +
                `at most ${paymentMethodIdMaxLength}); give this or payer_account_id, not both`,
            ),
          provider: z.enum(providerNames).optional().describe(`the provider of payment_method (default "${defaultProviderName}"); only with payment_method`),
          return_url: z
            .string()
            .optional()
            .describe(
              `an https page the payer returns to after authenticating (3-D Secure), at most ${returnUrlMaxLength} characters, no credentials; ` +
                'only with payment_method. With it, next_action is a redirect_to_url a person opens in a browser',
            ),
          payee_account_id: z.string().describe('account to credit'),
          amount: z.number().describe('integer amount in minor units, e.g. 1250 for 12.50'),
          currency: z.string().describe('ISO 4217 code, upper case, e.g. "USD"; must be both accounts\' currency'),
          capture: z.enum(captureModes).optional().describe('"manual" only reserves; capture_charge moves the money'),
          description: z
            .string()
            .optional()
            .describe(`free text, at most ${limits.descriptionMaxLength} characters; tab and line breaks are the only control characters allowed`),
          metadata: refusingPrototypeKey(z.object({}).catchall(z.string()))
            .optional()
            .describe(
              `at most ${limits.metadataMaxKeys} string values under keys of at most ${limits.metadataKeyMaxLength} characters; ` +
                `values at most ${limits.metadataValueMaxLength} characters, no control characters`,
            ),
        })
        .strict(),
      outputSchema: outputSchemas.chargeCreated,
      annotations: toolAnnotations.create_charge,
    },
    ({ idempotency_key, ...body }) =>
      run(deps, 'charges.create', async (tenant, principal) => {
        const actor = chargeActorOf(principal);
        const answer = await charges.charge(tenant, idempotency_key, body, { waitMs: deps.waitBudgetMs, ...(actor ? { actor } : {}) });
        const charge = chargeToWire(answer.charge);
        const summary = charge.status === 'requires_action'
          ? `Charge ${charge.id} is not decided: it waits for the payer (status requires_action).`
          : !answer.completed
          ? `Charge ${charge.id} is still processing (status ${charge.status}). Call create_charge again with the same idempotency_key, or get_charge.`
          : `${answer.replayed ? 'Replayed: this key was already used for this charge; no new charge was made. ' : ''}Charge ${charge.id} is ${charge.status}.`;
        return okResult(`${summary}${payerActionNote(charge)}`, { charge, replayed: answer.replayed, completed: answer.completed });
      }),
  );
}

/** get_charge, cancel_charge and capture_charge. */
function registerChargeTools(server: McpServer, deps: McpDeps): void {
  const { charges } = deps;
  server.registerTool(
    'get_charge',
    {
      title: 'Get a charge',
      description: 'The charge created with this idempotency_key, as it stands now (refunds included).',
      inputSchema: z.object({ idempotency_key: idempotencyKey }).strict(),
      outputSchema: outputSchemas.charge,
      annotations: toolAnnotations.get_charge,
    },
    ({ idempotency_key }) =>
      run(deps, 'charges.read', async (tenant) => {
        const charge = chargeToWire(await charges.getCharge(tenant, idempotency_key));
        return okResult(`Charge ${charge.id} is ${charge.status}.${payerActionNote(charge)}`, { charge });
      }),
  );

  server.registerTool(
    'cancel_charge',
    {
      title: 'Cancel a charge that has not succeeded',
      description:
        'Releases the hold of a pending or reserved (manual-capture) charge. Repeating it is harmless. A succeeded ' +
        'charge cannot be cancelled: use refund_charge.',
      inputSchema: z.object({ idempotency_key: idempotencyKey }).strict(),
      outputSchema: outputSchemas.charge,
      annotations: toolAnnotations.cancel_charge,
    },
    ({ idempotency_key }) =>
      run(deps, 'charges.cancel', async (tenant) => {
        const charge = chargeToWire(await charges.cancelCharge(tenant, idempotency_key));
        return okResult(`Charge ${charge.id} is ${charge.status}.`, { charge });
      }),
  );

  server.registerTool(
    'capture_charge',
    {
      title: 'Capture a manual-capture charge',
      description: 'Moves the reserved money: all of it, or `amount` of it (the rest is released). Repeating it is harmless.',
      inputSchema: z
        .object({
          idempotency_key: idempotencyKey,
          amount: z.number().optional().describe('capture less than reserved, in minor units; omit to capture all (null is refused)'),
        })
        .strict(),
      outputSchema: outputSchemas.charge,
      annotations: toolAnnotations.capture_charge,
    },
    ({ idempotency_key, amount }) =>
      run(deps, 'charges.capture', async (tenant) => {
        const charge = chargeToWire(await charges.captureCharge(tenant, idempotency_key, amount ?? null));
        return okResult(`Charge ${charge.id} is ${charge.status}.`, { charge });
      }),
  );
}

function registerBalanceTool(server: McpServer, deps: McpDeps): void {
  const { accounts } = deps;
  server.registerTool(
    'get_account_balance',
    {
      title: 'Get an account balance',
      description: 'posted (settled), pending (reserved by charges not yet captured) and available (posted - pending), in minor units.',
      inputSchema: z.object({ account_id: z.string().describe('the account id') }).strict(),
      outputSchema: outputSchemas.account,
      annotations: toolAnnotations.get_account_balance,
    },
    ({ account_id }) =>
      run(deps, 'accounts.read', async (tenant) => {
        const account = accountToWire(await accounts.getAccount(tenant, account_id));
        return okResult(`Account ${account.id}: ${account.available} ${account.currency} available.`, { account });
      }),
  );
}

/** list_events: what changed (docs/events.md), for an agent catching up after a crash or a wait. */
function registerEventsTool(server: McpServer, deps: McpDeps): void {
  const { charges } = deps;
  server.registerTool(
    'list_events',
    {
      title: 'List events: what happened to charges, refunds and deposits',
      description:
        'Newest first. Every change you may act on is an event: charge.reserved, charge.requires_action, charge.succeeded, ' +
        'charge.declined, charge.cancelled, refund.succeeded, refund.failed, deposit.credited; data.object is the object as ' +
        'it was at that change, sequence its place in that object\'s history. Use it instead of polling, or after a crash ' +
        'to learn what your charges did. Page with starting_after = the last event id of a page.',
      inputSchema: z
        .object({
          type: z.string().optional().describe('one event type, e.g. charge.succeeded, or charge.* for every type of one object'),
          object_id: z.string().optional().describe("only the events of this object: a charge's id (ch_…), a refund's (re_…), a deposit's (dep_…)"),
          limit: z.number().optional().describe(`at most this many events (1-${limits.listLimitMax}, ${limits.listLimitDefault} when omitted)`),
          starting_after: z.string().optional().describe('an event id from an earlier page: the events after (older than) it'),
        })
        .strict(),
      outputSchema: outputSchemas.events,
      annotations: toolAnnotations.list_events,
    },
    ({ type, object_id, limit, starting_after }) =>
      run(deps, 'events.read', async (tenant, principal) => {
        // The HTTP list's own parser (strings, as a query string carries them): the same rules and refusals.
        const query = Object.fromEntries(
          Object.entries({ type, object_id, limit: limit === undefined ? undefined : String(limit), starting_after }).filter(([, value]) => value !== undefined),
        );
        const page = await charges.listEventsFromQuery(tenant, query, { role: principal.role });
        const events = page.events.map((event) => renderEvent(event));
        const summary = events.length === 0 ? 'No events.' : `${events.length} events, newest first: ${events.map((e) => `${e.type} ${e.data.object.id}`).join('; ')}.`;
        return okResult(`${summary}${page.hasMore ? ` More: call again with starting_after ${events.at(-1)!.id}.` : ''}`, { events, has_more: page.hasMore });
      }),
  );
}

function registerRefundTool(server: McpServer, deps: McpDeps): void {
  const { charges } = deps;
  server.registerTool(
    'refund_charge',
    {
      title: 'Refund a charge (exactly once per refund_idempotency_key)',
      description:
        'Refunds a succeeded charge: all that is left of it, or `amount` of it. The refund has its own key: ' +
        'REUSE refund_idempotency_key when you retry, and use a new one for each further partial refund. ' +
        'Refunds never add up to more than was captured.',
      inputSchema: z
        .object({
          idempotency_key: idempotencyKey,
          refund_idempotency_key: z
            .string()
            .describe('Idempotency key of this refund (1-255 visible ASCII characters); the same key on retry refunds once.'),
          amount: z.number().optional().describe('refund this much, in minor units; omit to refund all that is left (null is refused)'),
        })
        .strict(),
      outputSchema: outputSchemas.refundCreated,
      annotations: toolAnnotations.refund_charge,
    },
    ({ idempotency_key, refund_idempotency_key, amount }) =>
      run(deps, 'refunds.create', async (tenant, principal) => {
        const actor = chargeActorOf(principal);
        // Checked here only to name the arguments as this tool does; the client applies the same rules.
        assertIdempotencyKey(idempotency_key, 'idempotency_key');
        assertIdempotencyKey(refund_idempotency_key, 'refund_idempotency_key');
        const answer = await charges.refund(tenant, idempotency_key, refund_idempotency_key, amount === undefined ? {} : { amount }, {
          waitMs: deps.waitBudgetMs,
          ...(actor ? { actor } : {}),
        });
        const refund = refundToWire(answer.refund);
        const summary = !answer.completed
          ? `Refund ${refund.id} is still processing. Call refund_charge again with the same keys.`
          : `${answer.replayed ? 'Replayed: this refund key was already used; nothing new was refunded. ' : ''}Refund ${refund.id} ${refund.status}: ${refund.amount} ${refund.currency}.`;
        return okResult(summary, { refund, replayed: answer.replayed, completed: answer.completed });
      }),
  );
}
