import { Ajv } from 'ajv';
import { describe, expect, it } from 'vitest';
import { createApiKey } from '../src/auth/api-keys.js';
import { chargeWorkflowId, type Charge } from '../src/domain/charge.js';
import { noMandate } from '../src/domain/mandate.js';
import { clearingAccountId, paymentMethodIdMaxLength, returnUrlMaxLength } from '../src/domain/providers.js';
import { countLedger } from '../src/ledger/reports.js';
import { buildChargeIntent, chargeFingerprint } from '../src/service/intent.js';
import { canonicalJson, sha256Hex } from '../src/domain/request-fingerprint.js';
import { ValidationError } from '../src/domain/errors.js';
import { parseChargeRequest } from '../src/service/validation.js';
import { chargeToWire, wireChargeSchema } from '../src/service/wire.js';
import { wireProblemSchema } from '../src/http/problem.js';
import { withoutNulls } from '../src/mcp/portable-schema.js';
import { describeCharge } from '../src/cli/commands/surface.js';
import { runCli as cli } from './support/cli.js';
import { callTool, mcpOverHttp } from './support/mcp.js';
import { expectLedgerInvariants, newKey, openAccount, workflowExists, useHarness } from './support/harness.js';
import { fundedApiTenant, useApi } from './support/api.js';

const h = useHarness();
const api = useApi();
const amountMinorMax = 1_000_000;

/** A provider charge's body: a payment method instead of a payer account. */
function providerBody(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return { order_id: 'order-p1', payment_method: 'pm_card_visa', payee_account_id: 'payee', amount: 1_250, currency: 'USD', ...overrides };
}

function withoutPaymentMethod(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  const { payment_method: _omitted, ...rest } = providerBody(overrides);
  return rest;
}

const neither = /^is required: a charge names payer_account_id \(a ledger account\) or payment_method \(through a provider\)$/;
const both = /not both$/;

describe('a provider charge names payment_method: refused bodies get a 400 naming each field, and nothing starts', () => {
  it('both, neither, a bad or too long payment method, an unknown provider, a provider without payment_method', async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'provider-validation' });
    const before = await countLedger(h.pool, tenant);
    const cases: Array<[string, unknown, Array<[string, RegExp]>]> = [
      ['both payers', providerBody({ payer_account_id: 'payer' }), [['payer_account_id', both], ['payment_method', both]]],
      ['neither payer', withoutPaymentMethod(), [['payer_account_id', neither], ['payment_method', neither]]],
      // The rule is judged with the other fields, so one answer names every problem.
      ['neither payer and a bad amount', withoutPaymentMethod({ amount: 0 }), [['amount', /at least 1/], ['payer_account_id', neither], ['payment_method', neither]]],
      ['provider without payment_method', withoutPaymentMethod({ payer_account_id: 'payer', provider: 'stripe' }), [['provider', /allowed only with payment_method/]]],
      ['unknown provider', providerBody({ provider: 'adyen' }), [['provider', /^must be one of "stripe"$/]]],
      ['provider null', providerBody({ provider: null }), [['provider', /null is not a value/]]],
      ['payment_method null', providerBody({ payment_method: null }), [['payment_method', /null is not a value/]]],
      ['payment_method a number', providerBody({ payment_method: 42 }), [['payment_method', /^must be a string$/]]],
      ['payment_method empty', providerBody({ payment_method: '' }), [['payment_method', /^must not be empty$/]]],
      ['payment_method with a space', providerBody({ payment_method: 'pm card' }), [['payment_method', /U\+0020 at position 2 is not allowed/]]],
      ['payment_method with NUL', providerBody({ payment_method: 'pm_\u0000' }), [['payment_method', /U\+0000 at position 3 is not allowed/]]],
      ['payment_method with a control character', providerBody({ payment_method: 'pm_\u001b[31m' }), [['payment_method', /U\+001B at position 3/]]],
      ['payment_method with a lone surrogate', providerBody({ payment_method: 'pm_\ud800' }), [['payment_method', /U\+D800 at position 3/]]],
      ['payment_method one too long', providerBody({ payment_method: 'p'.repeat(paymentMethodIdMaxLength + 1) }), [['payment_method', /is 256 characters long; at most 255/]]],
      // Within the API's 64 KiB body limit, so the field's own rule answers (a larger body is a 413).
      ['payment_method huge', providerBody({ payment_method: 'p'.repeat(60_000) }), [['payment_method', /is 60000 characters long; at most 255/]]],
      ['unknown field beside payment_method', providerBody({ card: '4242' }), [['card', /not a known field/]]],
    ];
    for (const [label, body, expected] of cases) {
      const idempotencyKey = newKey('provider-bad');
      const response = await api.request('/v1/charges', { apiKey, body, headers: { 'idempotency-key': idempotencyKey } });
      expect(response.status, label).toBe(400);
      expect(response.headers.get('content-type'), label).toMatch(/^application\/problem\+json/);
      const problem = wireProblemSchema.parse(response.body);
      expect(problem.type, label).toBe('validation_error');
      const named = (problem.errors ?? []).map((error) => error.field).sort();
      expect(named, `${label}: ${JSON.stringify(problem.errors)}`).toEqual(expected.map(([field]) => field).sort());
      for (const [field, message] of expected) {
        expect(problem.errors!.find((error) => error.field === field)!.message, `${label}: ${field}`).toMatch(message);
      }
      expect(await workflowExists(h, chargeWorkflowId(tenant, idempotencyKey)), label).toBe(false);
    }
    expect(await countLedger(h.pool, tenant)).toEqual(before);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('return_url: https only, no credentials, bounded, valid Unicode, no control characters, only with payment_method; 400 naming it', async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'provider-return-url' });
    const before = await countLedger(h.pool, tenant);
    const longest = `https://shop.example/${'a'.repeat(returnUrlMaxLength - 'https://shop.example/'.length)}`;
    const cases: Array<[string, unknown, Array<[string, RegExp]>]> = [
      ['http', providerBody({ return_url: 'http://shop.example/back' }), [['return_url', /must be an https URL/]]],
      ['another scheme', providerBody({ return_url: 'javascript:alert(1)' }), [['return_url', /must be an https URL/]]],
      ['no host', providerBody({ return_url: 'https://' }), [['return_url', /must be an absolute https URL/]]],
      ['user and password', providerBody({ return_url: 'https://user:secret@shop.example/back' }), [['return_url', /must not carry credentials/]]],
      ['a user alone', providerBody({ return_url: 'https://user@shop.example/back' }), [['return_url', /must not carry credentials/]]],
      ['an empty user', providerBody({ return_url: 'https://@shop.example/back' }), [['return_url', /must not carry credentials/]]],
      ['one too long', providerBody({ return_url: `${longest}a` }), [['return_url', new RegExp(`is ${returnUrlMaxLength + 1} characters long; at most ${returnUrlMaxLength}$`)]]],
      ['huge', providerBody({ return_url: `https://shop.example/${'a'.repeat(60_000)}` }), [['return_url', /characters long; at most 2048/]]],
      ['a control character', providerBody({ return_url: 'https://shop.example/\u001b[31m' }), [['return_url', /control characters: U\+001B at position 21/]]],
      ['NUL', providerBody({ return_url: 'https://shop.example/\u0000' }), [['return_url', /U\+0000 at position 21/]]],
      ['a line break', providerBody({ return_url: 'https://shop.example/\nSet-Cookie: x' }), [['return_url', /U\+000A/]]],
      ['a lone surrogate', providerBody({ return_url: 'https://shop.example/\ud800' }), [['return_url', /lone surrogate U\+D800/]]],
      ['a space', providerBody({ return_url: 'https://shop.example/a b' }), [['return_url', /without spaces or backslashes.*U\+0020 at position 22/]]],
      ['a backslash', providerBody({ return_url: 'https:\\\\evil.example' }), [['return_url', /U\+005C/]]],
      ['empty', providerBody({ return_url: '' }), [['return_url', /must not be empty/]]],
      ['null', providerBody({ return_url: null }), [['return_url', /null is not a value/]]],
      ['a number', providerBody({ return_url: 42 }), [['return_url', /^must be a string$/]]],
      ['with a payer account', withoutPaymentMethod({ payer_account_id: 'payer', return_url: 'https://shop.example/back' }), [['return_url', /allowed only with payment_method/]]],
    ];
    for (const [label, body, expected] of cases) {
      const idempotencyKey = newKey('return-url-bad');
      const response = await api.request('/v1/charges', { apiKey, body, headers: { 'idempotency-key': idempotencyKey } });
      expect(response.status, label).toBe(400);
      const problem = wireProblemSchema.parse(response.body);
      expect(problem.type, label).toBe('validation_error');
      expect((problem.errors ?? []).map((error) => error.field), `${label}: ${JSON.stringify(problem.errors)}`).toEqual(expected.map(([field]) => field));
      for (const [field, message] of expected) {
        expect(problem.errors!.find((error) => error.field === field)!.message, `${label}: ${field}`).toMatch(message);
      }
      expect(await workflowExists(h, chargeWorkflowId(tenant, idempotencyKey)), label).toBe(false);
    }
    expect(await countLedger(h.pool, tenant)).toEqual(before);
    // The longest allowed, and an https URL with a port, query and fragment, are taken as sent.
    for (const url of [longest, 'HTTPS://Shop.Example:8443/back?order=1005&x=%20#done', 'https://xn--bcher-kva.example/zurück']) {
      expect(parseChargeRequest(providerBody({ return_url: url }), amountMinorMax).returnUrl).toBe(url);
    }
  });

  it("the payee is checked as for any charge, the clearing account (the ledger's, opened on first use) is not", async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'provider-accounts' });
    await openAccount(h.pool, tenant, 'payee-eur', { currency: 'EUR' });
    const before = await countLedger(h.pool, tenant);
    const cases: Array<[string, Record<string, unknown>, Array<[string, RegExp]>]> = [
      ['unknown payee', providerBody({ payee_account_id: 'nobody' }), [['payee_account_id', /^no account nobody for this tenant$/]]],
      ['payee in another currency', providerBody({ payee_account_id: 'payee-eur' }), [['currency', /^account payee-eur holds EUR, not USD$/]]],
    ];
    for (const [label, body, expected] of cases) {
      const idempotencyKey = newKey('provider-accounts');
      const response = await api.request('/v1/charges', { apiKey, body, headers: { 'idempotency-key': idempotencyKey } });
      expect(response.status, label).toBe(400);
      const problem = wireProblemSchema.parse(response.body);
      expect(problem.errors, label).toHaveLength(expected.length);
      expected.forEach(([field, message], index) => {
        expect(problem.errors![index]!.field, label).toBe(field);
        expect(problem.errors![index]!.message, label).toMatch(message);
      });
      expect(await workflowExists(h, chargeWorkflowId(tenant, idempotencyKey)), label).toBe(false);
    }
    expect(await countLedger(h.pool, tenant)).toEqual(before);
  });

  it("a key's mandate judges a provider charge as any other: outside it is a 403 naming the rule, nothing started", async () => {
    const { tenant } = await fundedApiTenant(api, { label: 'provider-mandate' });
    const { key } = await createApiKey(h.pool, tenant, 'mandated agent', 'agent', {
      ...noMandate,
      maxAmountMinor: 1_000,
      allowedPayeeAccountIds: ['payee'],
      currency: 'USD',
    });
    const before = await countLedger(h.pool, tenant);
    const attempts: Array<[string, Record<string, unknown>]> = [
      ['max_amount', providerBody({ amount: 5_000 })],
      ['payees', providerBody({ payee_account_id: 'elsewhere', amount: 500 })],
      ['currency', providerBody({ currency: 'EUR', amount: 500 })],
    ];
    for (const [rule, body] of attempts) {
      const idempotencyKey = newKey(rule);
      const response = await api.request('/v1/charges', { apiKey: key, body, headers: { 'idempotency-key': idempotencyKey } });
      expect(response.status, rule).toBe(403);
      expect(response.body, rule).toMatchObject({ type: 'mandate_exceeded', rule });
      expect(await workflowExists(h, chargeWorkflowId(tenant, idempotencyKey)), rule).toBe(false);
    }
    expect(await countLedger(h.pool, tenant)).toEqual(before);
  });
});

describe('a provider charge request, as the service builds it', () => {
  it('pays from the clearing account of its provider and currency, and names the instrument; provider defaults to stripe', () => {
    const request = parseChargeRequest(providerBody({ currency: 'EUR' }), amountMinorMax);
    expect(request).toEqual({
      orderId: 'order-p1',
      payerAccountId: clearingAccountId('stripe', 'EUR'),
      payeeAccountId: 'payee',
      amountMinor: 1_250,
      currency: 'EUR',
      captureMode: 'automatic',
      description: null,
      metadata: null,
      paymentMethod: { provider: 'stripe', id: 'pm_card_visa' },
    });
    expect(parseChargeRequest(providerBody({ provider: 'stripe' }), amountMinorMax)).toEqual(parseChargeRequest(providerBody(), amountMinorMax));
    const ledger = parseChargeRequest(withoutPaymentMethod({ payer_account_id: 'payer' }), amountMinorMax);
    expect(ledger.payerAccountId).toBe('payer');
    expect(ledger).not.toHaveProperty('paymentMethod');
  });

  it('its fingerprint names the payment method: stable, and unlike a ledger request or another instrument', () => {
    const intent = buildChargeIntent('t-fp', 'k-1', providerBody(), amountMinorMax);
    expect(intent.fingerprint).toMatch(/^v2:[0-9a-f]{64}$/);
    expect(buildChargeIntent('t-fp', 'k-1', providerBody(), amountMinorMax).fingerprint).toBe(intent.fingerprint);
    // Naming the default provider is the same request as leaving it out.
    expect(buildChargeIntent('t-fp', 'k-1', providerBody({ provider: 'stripe' }), amountMinorMax).fingerprint).toBe(intent.fingerprint);
    // The same request paid by the clearing account itself, as a ledger charge, is another request.
    const { paymentMethod: _instrument, ...asLedgerCharge } = intent.request;
    expect(chargeFingerprint(asLedgerCharge)).not.toBe(intent.fingerprint);
    const ledgerIntent = buildChargeIntent('t-fp', 'k-1', withoutPaymentMethod({ payer_account_id: 'payer' }), amountMinorMax);
    expect(ledgerIntent.fingerprint).not.toBe(intent.fingerprint);
    expect(buildChargeIntent('t-fp', 'k-1', providerBody({ payment_method: 'pm_card_mastercard' }), amountMinorMax).fingerprint).not.toBe(intent.fingerprint);
  });

  it('return_url is part of the fingerprint: with one, or another, it is another request; without, the fingerprint is as before it existed', () => {
    const without = buildChargeIntent('t-fp', 'k-1', providerBody(), amountMinorMax);
    const withUrl = buildChargeIntent('t-fp', 'k-1', providerBody({ return_url: 'https://shop.example/back' }), amountMinorMax);
    expect(withUrl.request.returnUrl).toBe('https://shop.example/back');
    expect(without.request).not.toHaveProperty('returnUrl');
    expect(withUrl.fingerprint).toMatch(/^v2:[0-9a-f]{64}$/);
    expect(withUrl.fingerprint).not.toBe(without.fingerprint);
    expect(buildChargeIntent('t-fp', 'k-1', providerBody({ return_url: 'https://shop.example/other' }), amountMinorMax).fingerprint).not.toBe(withUrl.fingerprint);
    // The v2 definition of a request without return_url, written out: keys recorded before it existed still compare equal.
    expect(without.fingerprint).toBe(
      `v2:${sha256Hex(canonicalJson({ order_id: 'order-p1', payment_method: 'pm_card_visa', provider: 'stripe', payee_account_id: 'payee', amount: 1_250, currency: 'USD', capture: 'automatic' }))}`,
    );
  });

  it('every refusal names its field before anything is built', () => {
    expect(() => buildChargeIntent('t-fp', 'k-1', providerBody({ payer_account_id: 'payer' }), amountMinorMax)).toThrow(ValidationError);
    try {
      buildChargeIntent('t-fp', 'k-1', withoutPaymentMethod(), amountMinorMax);
      expect.unreachable('neither payer is refused');
    } catch (error) {
      expect((error as ValidationError).errors.map((e) => e.field)).toEqual(['payer_account_id', 'payment_method']);
    }
  });
});

const createdAt = '2026-11-25T00:00:00.000Z';
function storedCharge(overrides: Partial<Charge>): Charge {
  return {
    id: 'ch_0123456789abcdef01234567',
    tenant: 't-wire',
    idempotencyKey: 'k-wire',
    status: 'succeeded',
    amountMinor: 1_250,
    amountCapturedMinor: 1_250,
    amountRefundedMinor: 0,
    amountHeldMinor: 0,
    currency: 'USD',
    orderId: 'order-p1',
    payerAccountId: clearingAccountId('stripe', 'USD'),
    payeeAccountId: 'payee',
    captureMode: 'automatic',
    description: null,
    metadata: null,
    declineCode: null,
    failureReason: null,
    holdExpiresAt: null,
    createdAt,
    updatedAt: createdAt,
    ...overrides,
  };
}

const threeDSecure = { type: 'use_stripe_sdk', use_stripe_sdk: { type: 'three_d_secure_redirect' } };

describe('a provider charge on the wire', () => {
  it('requires_action: payment_method, the provider object, and next_action at top level too', () => {
    const wire = chargeToWire(
      storedCharge({
        status: 'requires_action',
        amountCapturedMinor: 0,
        amountHeldMinor: 1_250,
        provider: { provider: 'stripe', paymentMethod: 'pm_card_threeDSecure2Required', paymentId: 'pi_123', state: 'requires_action', nextAction: threeDSecure, declineCode: null },
      }),
    );
    expect(wireChargeSchema.parse(wire)).toEqual(wire);
    expect(wire).toMatchObject({
      status: 'requires_action',
      payer_account_id: '@provider/stripe/USD',
      payment_method: 'pm_card_threeDSecure2Required',
      provider: { name: 'stripe', payment_id: 'pi_123', state: 'requires_action', next_action: threeDSecure, decline_code: null },
      next_action: threeDSecure,
    });
    expect(describeCharge(wire)).toMatch(/requires_action.*pm_card_threeDSecure2Required -> payee.*\n {2}stripe: payment pi_123, requires_action.*\n.*next_action \{"type":"use_stripe_sdk"/s);
  });

  it('once the payer acted, or for a decline, next_action is null; the provider decline code sits beside the caller one', () => {
    const captured = chargeToWire(
      storedCharge({ provider: { provider: 'stripe', paymentMethod: 'pm_card_visa', paymentId: 'pi_9', state: 'captured', nextAction: threeDSecure, declineCode: null } }),
    );
    expect(captured).toMatchObject({ status: 'succeeded', next_action: null, provider: { state: 'captured', next_action: null } });
    const declined = chargeToWire(
      storedCharge({
        status: 'declined',
        amountCapturedMinor: 0,
        declineCode: 'insufficient_funds',
        provider: { provider: 'stripe', paymentMethod: 'pm_card_visa_chargeDeclinedInsufficientFunds', paymentId: 'pi_d', state: 'declined', nextAction: null, declineCode: 'insufficient_funds' },
      }),
    );
    expect(wireChargeSchema.parse(declined)).toEqual(declined);
    expect(declined).toMatchObject({ decline_code: 'insufficient_funds', provider: { state: 'declined', decline_code: 'insufficient_funds' }, next_action: null });
  });

  it('a ledger charge shows neither payment_method nor provider, and next_action null', () => {
    const wire = chargeToWire(storedCharge({ payerAccountId: 'payer' }));
    expect(wire).not.toHaveProperty('payment_method');
    expect(wire).not.toHaveProperty('provider');
    expect(wire.next_action).toBeNull();
    expect(describeCharge(wire)).toMatch(/^ch_\S+ {2}succeeded {2}1250 USD minor units {2}payer -> payee/);
    expect(describeCharge(wire)).not.toContain('\n');
  });
});

describe('the MCP create_charge tool takes payment_method', () => {
  it('input: payment_method and provider, payer_account_id no longer required; output: the provider fields, checked with draft-07', async () => {
    const { apiKey } = await fundedApiTenant(api, { label: 'provider-mcp' });
    const { client, transport } = mcpOverHttp(api.baseUrl, apiKey);
    await client.connect(transport);
    try {
      const { tools } = await client.listTools();
      const create = tools.find((tool) => tool.name === 'create_charge')!;
      const input = create.inputSchema as { properties: Record<string, any>; required?: string[] };
      expect(input.properties.payment_method).toMatchObject({ type: 'string' });
      expect(input.properties.provider).toMatchObject({ enum: ['stripe'] });
      expect(input.properties.return_url).toMatchObject({ type: 'string' });
      expect(input.required).not.toContain('return_url');
      expect(input.required).not.toContain('payer_account_id');
      expect(input.required).not.toContain('payment_method');
      expect(create.description).toMatch(/EXACTLY ONE of payer_account_id .* and payment_method/);
      expect(create.description).toMatch(/requires_action.*next_action/);

      const charge = (create.outputSchema as any).properties.charge;
      expect(Object.keys(charge.properties)).toEqual(expect.arrayContaining(['payment_method', 'provider', 'next_action']));
      const validate = new Ajv({ allErrors: true }).compile(create.outputSchema!);
      // As the tool answers it: the HTTP wire object without its null members (tool-results.ts).
      const wire = withoutNulls(chargeToWire(
        storedCharge({
          status: 'requires_action',
          provider: { provider: 'stripe', paymentMethod: 'pm_card_threeDSecure2Required', paymentId: 'pi_1', state: 'requires_action', nextAction: threeDSecure, declineCode: null },
        }),
      ));
      expect(validate({ charge: wire, replayed: false, completed: false }), JSON.stringify(validate.errors)).toBe(true);
      expect(validate({ charge: { ...wire, provider: { ...wire.provider, state: 'lost' } } })).toBe(false);

      const bothPayers = await callTool(client, 'create_charge', { idempotency_key: newKey('mcp-both'), ...providerBody({ payer_account_id: 'payer' }) });
      expect(bothPayers.isError).toBe(true);
      expect((bothPayers.structuredContent as any).error).toMatchObject({ type: 'validation_error', retry: 'fix_request' });
      expect((bothPayers.structuredContent as any).error.errors.map((e: { field: string }) => e.field).sort()).toEqual(['payer_account_id', 'payment_method']);
      const neitherPayer = await callTool(client, 'create_charge', { idempotency_key: newKey('mcp-neither'), ...withoutPaymentMethod() });
      expect((neitherPayer.structuredContent as any).error.errors.map((e: { field: string }) => e.field).sort()).toEqual(['payer_account_id', 'payment_method']);
      expect(validate(neitherPayer.structuredContent), JSON.stringify(validate.errors)).toBe(true);
      // The same return_url rules as the HTTP body's, named as the tool names the argument.
      const httpUrl = await callTool(client, 'create_charge', { idempotency_key: newKey('mcp-return-url'), ...providerBody({ return_url: 'http://shop.example/back' }) });
      expect((httpUrl.structuredContent as any).error).toMatchObject({ type: 'validation_error', errors: [{ field: 'return_url', message: expect.stringMatching(/https/) }] });
    } finally {
      await client.close();
    }
  });
});

describe('the CLI charge command takes --payment-method', () => {
  it('--payer and --payment-method are exclusive, one is required, --provider needs --payment-method: exit 2 naming the flags, before connecting', { timeout: 120_000 }, async () => {
    const common = ['charge', '--tenant', 't-cli-provider', '--key', newKey('cli-provider'), '--order', 'o-1', '--payee', 'payee', '--amount', '100', '--currency', 'USD', '--json'];
    const cases: Array<[string, string[], string[]]> = [
      ['both', ['--payer', 'payer', '--payment-method', 'pm_card_visa'], ['--payer', '--payment-method']],
      ['neither', [], ['--payer', '--payment-method']],
      ['provider alone', ['--payer', 'payer', '--provider', 'stripe'], ['--provider']],
      ['return url without a payment method', ['--payer', 'payer', '--return-url', 'https://shop.example/back'], ['--return-url']],
    ];
    // Nothing is reached: the servers named do not exist, so a refusal after connecting would be a 75, not a 2.
    const nowhere = { TEMPORAL_ADDRESS: '127.0.0.1:1', DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none' };
    const results = await Promise.all(cases.map(([, flags]) => cli([...common, ...flags], nowhere)));
    cases.forEach(([label, , fields], index) => {
      const result = results[index]!;
      expect(result.code, `${label}: ${result.stdout}${result.stderr}`).toBe(2);
      expect(result.json.error.type, label).toBe('validation_error');
      expect(result.json.error.errors.map((e: { field: string }) => e.field), label).toEqual(fields);
    });
  });
});
