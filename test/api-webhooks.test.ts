import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { webhookSignatureHeaderValue } from '../src/domain/webhook-signature.js';
import { countLedger } from '../src/ledger/reports.js';
import { addWebhookSecret, revokeProviderSecret, rotateWebhookSecrets } from '../src/service/webhooks.js';
import { useApi, type TestResponse } from './support/api.js';
import { runCli } from './support/cli.js';
import { balanceOf, expectLedgerInvariants, fundedTenant, newKey, openAccount, useHarness } from './support/harness.js';

const h = useHarness();
const api = useApi();

/** A provider of the test's own, so no two tests share secrets or event ids. */
function newProvider(label: string): string {
  return `${label}-${randomBytes(4).toString('hex')}`;
}

async function providerWithSecret(label: string): Promise<{ provider: string; secret: string; secretId: string }> {
  const provider = newProvider(label);
  const { secret, record } = await addWebhookSecret(h.pool, provider);
  return { provider, secret, secretId: record.id };
}

function depositEvent(tenant: string, overrides: { id?: string; amount?: number; account?: string; currency?: string } = {}) {
  return {
    id: overrides.id ?? newKey('evt'),
    type: 'deposit.succeeded',
    data: {
      tenant,
      account_id: overrides.account ?? 'payer',
      amount_minor: overrides.amount ?? 2_500,
      currency: overrides.currency ?? 'USD',
    },
  };
}

/** Each CLI run starts a Node process with a TypeScript loader: seconds apiece on a busy machine. */
const cliTestTimeoutMs = 240_000;

const nowSeconds = () => Math.floor(Date.now() / 1000);

/** Posts a delivery as a provider would: the body's bytes, signed with each secret given. */
function deliver(
  provider: string,
  body: unknown,
  options: { secrets?: string[]; t?: number; header?: string | null; rawBody?: string; contentType?: string } = {},
): Promise<TestResponse> {
  const rawBody = options.rawBody ?? JSON.stringify(body);
  const headers: Record<string, string> = { 'content-type': options.contentType ?? 'application/json' };
  const header = options.header === undefined ? webhookSignatureHeaderValue(options.secrets ?? [], options.t ?? nowSeconds(), rawBody) : options.header;
  if (header !== null) headers['chargeguard-signature'] = header;
  return api.request(`/v1/webhooks/${provider}`, { rawBody, headers, apiKey: null });
}

/** Everything a refused delivery must leave as it was. */
async function snapshot(tenant: string) {
  const [ledger, events, payer] = await Promise.all([
    countLedger(h.pool, tenant),
    h.pool.query<{ n: number }>('SELECT count(*)::bigint AS n FROM webhook_events'),
    balanceOf(h.pool, tenant, 'payer'),
  ]);
  return { ledger, events: events.rows[0]!.n, payerPosted: payer.postedMinor };
}

async function depositTransfers(tenant: string, provider: string, eventId: string): Promise<number> {
  const result = await h.pool.query<{ n: number }>(
    "SELECT count(*)::bigint AS n FROM transfers WHERE tenant = $1 AND kind = 'deposit' AND reference = $2",
    [tenant, `webhook:${provider}:${eventId}`],
  );
  return result.rows[0]!.n;
}

describe('POST /v1/webhooks/{provider}: a signed deposit.succeeded credits once', () => {
  it('credits the account, visible through the API; a redelivery answers the first result and moves nothing', async () => {
    const tenant = await fundedTenant(h, { label: 'wh-credit' });
    const apiKey = await api.keyFor(tenant);
    const { provider, secret, secretId } = await providerWithSecret('credit');
    const event = depositEvent(tenant, { amount: 2_500 });

    const first = await deliver(provider, event, { secrets: [secret] });
    expect(first.status, first.text).toBe(200);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(first.body).toMatchObject({
      object: 'webhook_event',
      id: event.id,
      provider,
      type: 'deposit.succeeded',
      status: 'credited',
      tenant,
      deposit: { object: 'deposit', account_id: 'payer', amount: 2_500, currency: 'USD' },
    });
    expect(first.body.deposit.id).toMatch(/^dep_\d+$/);
    expect((await api.request('/v1/accounts/payer', { apiKey })).body).toMatchObject({ posted: 12_500, available: 12_500 });

    // Redelivered later, signed afresh: the same answer, nothing moves.
    const again = await deliver(provider, event, { secrets: [secret], t: nowSeconds() - 100 });
    expect(again.status, again.text).toBe(200);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toEqual(first.body);
    expect((await api.request('/v1/accounts/payer', { apiKey })).body).toMatchObject({ posted: 12_500 });

    // The audit: the event row names provider, secret and transfer; the transfer names no API key.
    const row = await h.pool.query(
      `SELECT e.provider, e.secret_id, e.tenant, e.amount_minor, t.created_by_key_id, t.reference
         FROM webhook_events e JOIN transfers t ON t.id = e.transfer_id WHERE e.provider = $1 AND e.event_id = $2`,
      [provider, event.id],
    );
    expect(row.rows).toEqual([
      { provider, secret_id: secretId, tenant, amount_minor: 2_500, created_by_key_id: null, reference: `webhook:${provider}:${event.id}` },
    ]);
    expect(await depositTransfers(tenant, provider, event.id)).toBe(1);
    // The event record is append-only, like the journal it explains.
    await expect(h.pool.query('UPDATE webhook_events SET amount_minor = 1 WHERE provider = $1', [provider])).rejects.toMatchObject({ code: 'CGJ01' });
    await expect(h.pool.query('DELETE FROM webhook_events WHERE provider = $1', [provider])).rejects.toMatchObject({ code: 'CGJ01' });
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('20 concurrent deliveries of one event: exactly one credit, all 200 with the same body', async () => {
    const tenant = await fundedTenant(h, { label: 'wh-race' });
    const { provider, secret } = await providerWithSecret('race');
    const event = depositEvent(tenant, { amount: 777 });
    const rawBody = JSON.stringify(event);
    const header = webhookSignatureHeaderValue([secret], nowSeconds(), rawBody);

    const answers = await Promise.all(Array.from({ length: 20 }, () => deliver(provider, event, { rawBody, header })));
    expect(answers.map((a) => a.status)).toEqual(Array(20).fill(200));
    expect(new Set(answers.map((a) => a.text)).size).toBe(1);
    expect(answers.filter((a) => a.headers.get('idempotent-replayed') === null)).toHaveLength(1);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(10_000 + 777);
    expect(await depositTransfers(tenant, provider, event.id)).toBe(1);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('one event id sent for two tenants at once (10 deliveries each): one credit in all', async () => {
    const [a, b] = await Promise.all([fundedTenant(h, { label: 'wh-race-a' }), fundedTenant(h, { label: 'wh-race-b' })]);
    const { provider, secret } = await providerWithSecret('xrace');
    const id = newKey('evt');
    const deliveries = [a, b].flatMap((tenant) => Array.from({ length: 10 }, () => deliver(provider, depositEvent(tenant, { id, amount: 300 }), { secrets: [secret] })));
    const answers = await Promise.all(deliveries);
    const winner = answers.find((answer) => answer.status === 200 && answer.headers.get('idempotent-replayed') === null);
    expect(winner, answers.map((answer) => answer.status).join(',')).toBeDefined();
    expect(answers.filter((answer) => answer.status === 200 && answer.headers.get('idempotent-replayed') === null)).toHaveLength(1);
    const winnerTenant = winner!.body.tenant as string;
    const loserTenant = winnerTenant === a ? b : a;
    for (const answer of answers) {
      // The winner's tenant gets the first result; the other tenant's deliveries are another event under a reused id.
      if (answer.status === 200) expect(answer.body).toEqual(winner!.body);
      else expect(answer.body).toMatchObject({ status: 422, type: 'idempotency_conflict' });
    }
    expect(answers.filter((answer) => answer.status === 422)).toHaveLength(10);
    expect((await balanceOf(h.pool, winnerTenant, 'payer')).postedMinor).toBe(10_300);
    expect((await balanceOf(h.pool, loserTenant, 'payer')).postedMinor).toBe(10_000);
    expect(await depositTransfers(loserTenant, provider, id)).toBe(0);
    await expectLedgerInvariants(h.pool, a);
    await expectLedgerInvariants(h.pool, b);
  });

  it('the same event id for another tenant, or with another amount, is a 422 naming what differs; nothing moves', async () => {
    const first = await fundedTenant(h, { label: 'wh-first' });
    const other = await fundedTenant(h, { label: 'wh-other' });
    const { provider, secret } = await providerWithSecret('reuse');
    const event = depositEvent(first, { amount: 1_000 });
    expect((await deliver(provider, event, { secrets: [secret] })).status).toBe(200);
    const before = { first: await snapshot(first), other: await snapshot(other) };

    const elsewhere = await deliver(provider, { ...event, data: { ...event.data, tenant: other } }, { secrets: [secret] });
    expect(elsewhere.status, elsewhere.text).toBe(422);
    expect(elsewhere.body).toMatchObject({ type: 'idempotency_conflict' });
    expect(elsewhere.body.detail).toMatch(new RegExp(`event ${event.id} of provider ${provider} was first delivered with other data\\.tenant `));

    const more = await deliver(provider, { ...event, data: { ...event.data, amount_minor: 9_999 } }, { secrets: [secret] });
    expect(more.status, more.text).toBe(422);
    expect(more.body.detail).toMatch(/other data\.amount_minor \(/);

    expect(await snapshot(first)).toEqual(before.first);
    expect(await snapshot(other)).toEqual(before.other);
    expect((await balanceOf(h.pool, first, 'payer')).postedMinor).toBe(11_000);
  });

  it('an event of another type is acknowledged with 200 ignored and records nothing', async () => {
    const tenant = await fundedTenant(h, { label: 'wh-ignored' });
    const { provider, secret } = await providerWithSecret('ignored');
    const before = await snapshot(tenant);
    const event = { id: newKey('evt'), type: 'payout.paid', data: { anything: [1, 2, 3] } };
    const answer = await deliver(provider, event, { secrets: [secret] });
    expect(answer.status, answer.text).toBe(200);
    expect(answer.body).toEqual({ object: 'webhook_event', id: event.id, provider, type: 'payout.paid', status: 'ignored' });
    expect(await snapshot(tenant)).toEqual(before);
  });
});

describe('refused deliveries write nothing', () => {
  it('bad signature, stale or future t, missing, malformed or doubled header, tampered body, unknown provider', async () => {
    const tenant = await fundedTenant(h, { label: 'wh-refused' });
    const { provider, secret } = await providerWithSecret('refused');
    const event = depositEvent(tenant);
    const rawBody = JSON.stringify(event);
    const signed = (t: number, body = rawBody, secrets = [secret]) => webhookSignatureHeaderValue(secrets, t, body);
    const mismatch = /^Chargeguard-Signature: no v1 signature matches a current secret of this provider/;
    const before = await snapshot(tenant);

    const cases: Array<{ label: string; send: () => Promise<TestResponse>; status: number; type: string; detail: RegExp }> = [
      { label: 'wrong secret', send: () => deliver(provider, event, { header: signed(nowSeconds(), rawBody, [`${secret}x`]) }), status: 401, type: 'unauthorized', detail: mismatch },
      { label: 'stale t (301 s)', send: () => deliver(provider, event, { header: signed(nowSeconds() - 301) }), status: 401, type: 'unauthorized', detail: /t is 30[12] s old; signatures are accepted for 300 s \(webhookToleranceSeconds\)/ },
      { label: 'future t (400 s)', send: () => deliver(provider, event, { header: signed(nowSeconds() + 400) }), status: 401, type: 'unauthorized', detail: /t is (39\d|400) s in the future; at most 300 s/ },
      { label: 'missing header', send: () => deliver(provider, event, { header: null }), status: 401, type: 'unauthorized', detail: /no Chargeguard-Signature header/ },
      { label: 'malformed header', send: () => deliver(provider, event, { header: 'sha256=abc' }), status: 400, type: 'validation_error', detail: /^Chargeguard-Signature: must look like "t=<unix seconds>,v1=<64 hex digits>": t is missing/ },
      { label: 'tampered body', send: () => deliver(provider, event, { header: signed(nowSeconds()), rawBody: rawBody.replace('2500', '2500000') }), status: 401, type: 'unauthorized', detail: mismatch },
      { label: 'same JSON re-serialised', send: () => deliver(provider, event, { header: signed(nowSeconds()), rawBody: JSON.stringify(event, null, 2) }), status: 401, type: 'unauthorized', detail: mismatch },
      { label: 'unknown provider', send: () => deliver(newProvider('nobody'), event, { header: signed(nowSeconds()) }), status: 401, type: 'unauthorized', detail: mismatch },
      { label: 'provider name not allowed', send: () => deliver('Not_A_Provider', event, { header: signed(nowSeconds()) }), status: 400, type: 'validation_error', detail: /^provider: must be lower-case letters/ },
    ];
    for (const attempt of cases) {
      const answer = await attempt.send();
      expect(answer.status, `${attempt.label}: ${answer.text}`).toBe(attempt.status);
      expect(answer.headers.get('content-type'), attempt.label).toMatch(/^application\/problem\+json/);
      expect(answer.body.type, attempt.label).toBe(attempt.type);
      expect(answer.body.detail, attempt.label).toMatch(attempt.detail);
      if (attempt.status === 401) expect(answer.headers.get('www-authenticate'), attempt.label).toBe('Chargeguard-Signature realm="chargeguard-webhooks"');
    }
    // A header sent twice reaches the server joined into one value with two t=: malformed.
    const doubled = await fetch(`${api.baseUrl}/v1/webhooks/${provider}`, {
      method: 'POST',
      headers: [['content-type', 'application/json'], ['chargeguard-signature', signed(nowSeconds())], ['chargeguard-signature', signed(nowSeconds())]],
      body: rawBody,
    });
    expect(doubled.status).toBe(400);
    expect(((await doubled.json()) as { detail: string }).detail).toMatch(/t is given twice/);

    expect(await snapshot(tenant)).toEqual(before);
    // The same delivery, correctly signed, still credits: nothing above used the event id up.
    expect((await deliver(provider, event, { secrets: [secret] })).status).toBe(200);
    expect((await snapshot(tenant)).payerPosted).toBe(before.payerPosted + 2_500);
  });

  it('a signed body that is not a valid event: 400 naming the field (or 404 for an unknown account); nothing written', async () => {
    const tenant = await fundedTenant(h, { label: 'wh-invalid' });
    await openAccount(h.pool, tenant, 'euros', { currency: 'EUR' });
    const { provider, secret } = await providerWithSecret('invalid');
    const good = depositEvent(tenant);
    const before = await snapshot(tenant);

    const cases: Array<{ label: string; rawBody: string; status: number; fields?: string[]; detail?: RegExp }> = [
      { label: 'unknown field in data', rawBody: JSON.stringify({ ...good, data: { ...good.data, memo: 'x' } }), status: 400, fields: ['memo'] },
      { label: 'unknown top-level field', rawBody: JSON.stringify({ ...good, livemode: true }), status: 400, fields: ['livemode'] },
      { label: 'amount missing', rawBody: JSON.stringify({ ...good, data: { ...good.data, amount_minor: undefined } }), status: 400, fields: ['data.amount_minor'] },
      { label: 'amount zero', rawBody: JSON.stringify({ ...good, data: { ...good.data, amount_minor: 0 } }), status: 400, fields: ['data.amount_minor'] },
      { label: 'amount a string', rawBody: JSON.stringify({ ...good, data: { ...good.data, amount_minor: '2500' } }), status: 400, fields: ['data.amount_minor'] },
      { label: 'bad tenant', rawBody: JSON.stringify({ ...good, data: { ...good.data, tenant: 'Acme!' } }), status: 400, fields: ['data.tenant'] },
      { label: 'id missing', rawBody: JSON.stringify({ type: good.type, data: good.data }), status: 400, fields: ['id'] },
      { label: 'data null', rawBody: JSON.stringify({ ...good, data: null }), status: 400, fields: ['data'] },
      { label: 'not JSON', rawBody: '{"id":', status: 400, fields: ['body'] },
      { label: 'an array', rawBody: '[]', status: 400, fields: ['body'] },
      { label: 'empty', rawBody: '', status: 400, fields: ['body'] },
      { label: 'currency of another account', rawBody: JSON.stringify(depositEvent(tenant, { account: 'euros', currency: 'USD' })), status: 400, fields: ['data.currency'], detail: /is USD but account euros holds EUR/ },
      { label: 'unknown account', rawBody: JSON.stringify(depositEvent(tenant, { account: 'nobody' })), status: 404, detail: /no account nobody for tenant/ },
    ];
    for (const attempt of cases) {
      const answer = await deliver(provider, undefined, { rawBody: attempt.rawBody, secrets: [secret] });
      expect(answer.status, `${attempt.label}: ${answer.text}`).toBe(attempt.status);
      if (attempt.fields) expect(answer.body.errors.map((e: { field: string }) => e.field), attempt.label).toEqual(attempt.fields);
      if (attempt.detail) expect(answer.body.detail, attempt.label).toMatch(attempt.detail);
    }
    expect((await balanceOf(h.pool, tenant, 'euros')).postedMinor).toBe(0);
    expect(await snapshot(tenant)).toEqual(before);
  });

  it('415 for a body that is not JSON, 413 over the body limit, 405 for another method; no API key needed or used', async () => {
    const tenant = await fundedTenant(h, { label: 'wh-http' });
    const { provider, secret } = await providerWithSecret('http');
    const before = await snapshot(tenant);
    const text = await deliver(provider, undefined, { rawBody: 'id=evt_1', contentType: 'text/plain', secrets: [secret] });
    expect(text.status).toBe(415);
    const huge = JSON.stringify({ ...depositEvent(tenant), pad: 'x'.repeat(70 * 1024) });
    const tooLarge = await deliver(provider, undefined, { rawBody: huge, secrets: [secret] });
    expect(tooLarge.status).toBe(413);
    const get = await api.request(`/v1/webhooks/${provider}`, { apiKey: null });
    expect(get.status).toBe(405);
    expect(get.headers.get('allow')).toBe('POST');
    expect(await snapshot(tenant)).toEqual(before);

    // An API key is neither needed nor a substitute for the signature.
    const adminKey = await api.keyFor(tenant, 'admin');
    const withKey = await api.request(`/v1/webhooks/${provider}`, { apiKey: adminKey, body: depositEvent(tenant) });
    expect(withKey.status).toBe(401);
    expect(await snapshot(tenant)).toEqual(before);
  });
});

describe('secret rotation', () => {
  it('old and new secrets both verify during the overlap; the old one stops at revoke; overlap 0 stops it at once', async () => {
    const tenant = await fundedTenant(h, { label: 'wh-rotate' });
    const { provider, secret: oldSecret, secretId: oldId } = await providerWithSecret('rotate');
    const rotated = await rotateWebhookSecrets(h.pool, provider, 3_600);
    expect(rotated.expiring.map((s) => s.id)).toEqual([oldId]);
    const expiresAt = Date.parse(rotated.expiring[0]!.expiresAt!);
    expect(expiresAt - Date.now()).toBeGreaterThan(3_500_000);
    expect(expiresAt - Date.now()).toBeLessThanOrEqual(3_600_000);

    expect((await deliver(provider, depositEvent(tenant, { amount: 1 }), { secrets: [oldSecret] })).status).toBe(200);
    expect((await deliver(provider, depositEvent(tenant, { amount: 2 }), { secrets: [rotated.secret] })).status).toBe(200);
    expect((await deliver(provider, depositEvent(tenant, { amount: 4 }), { secrets: [oldSecret, rotated.secret] })).status).toBe(200);

    await revokeProviderSecret(h.pool, oldId);
    const before = await snapshot(tenant);
    const refused = await deliver(provider, depositEvent(tenant, { amount: 8 }), { secrets: [oldSecret] });
    expect(refused.status).toBe(401);
    expect(await snapshot(tenant)).toEqual(before);
    expect((await deliver(provider, depositEvent(tenant, { amount: 16 }), { secrets: [rotated.secret] })).status).toBe(200);

    // A rotation with no overlap: the previous secret stops at once.
    const immediate = await rotateWebhookSecrets(h.pool, provider, 0);
    expect((await deliver(provider, depositEvent(tenant, { amount: 32 }), { secrets: [rotated.secret] })).status).toBe(401);
    expect((await deliver(provider, depositEvent(tenant, { amount: 64 }), { secrets: [immediate.secret] })).status).toBe(200);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(10_000 + 1 + 2 + 4 + 16 + 64);
    await expectLedgerInvariants(h.pool, tenant);
  });
});

describe('chargeguard webhook-secrets', () => {
  it('add prints the secret once; list never does; rotate overlaps; revoke stops the old secret', async () => {
    const tenant = await fundedTenant(h, { label: 'wh-cli' });
    const provider = newProvider('cli');

    const added = await runCli(['webhook-secrets', 'add', provider, '--json']);
    expect(added.code, added.stderr).toBe(0);
    expect(added.json).toMatchObject({ provider, state: 'active', expires_at: null, revoked_at: null });
    expect(added.json.secret).toMatch(/^whsec_[A-Za-z0-9_-]{43}$/);
    expect(added.json.id).toMatch(/^whk_[0-9a-f]{16}$/);
    const firstSecret: string = added.json.secret;
    expect((await deliver(provider, depositEvent(tenant, { amount: 10 }), { secrets: [firstSecret] })).status).toBe(200);

    const human = await runCli(['webhook-secrets', 'add', provider]);
    expect(human.code, human.stderr).toBe(0);
    const [humanSecret, humanNote] = human.stdout.trim().split('\n');
    expect(humanSecret).toMatch(/^whsec_/);
    expect(humanNote).toMatch(/^\(whk_[0-9a-f]{16} for provider .*: give it to the provider now, it is not shown again\)$/);
    const humanId = /whk_[0-9a-f]{16}/.exec(humanNote!)![0];
    expect((await runCli(['webhook-secrets', 'revoke', humanId])).code).toBe(0);

    const rotated = await runCli(['webhook-secrets', 'rotate', provider, '--overlap-seconds', '600', '--json']);
    expect(rotated.code, rotated.stderr).toBe(0);
    expect(rotated.json.secret).toMatch(/^whsec_/);
    expect(rotated.json.expiring).toEqual([expect.objectContaining({ id: added.json.id, state: 'expiring' })]);
    const secondSecret: string = rotated.json.secret;

    const listings: string[][] = [['webhook-secrets', 'list', '--provider', provider], ['webhook-secrets', 'list']];
    for (const [args, listed] of (await Promise.all(listings.map(async (args) => [args, await runCli(args)] as const)))) {
      expect(listed.code, listed.stderr).toBe(0);
      for (const shown of [firstSecret, secondSecret, humanSecret!]) expect(listed.stdout, args.join(' ')).not.toContain(shown);
      expect(listed.stdout).not.toContain('whsec_');
    }
    const listed = await runCli(['webhook-secrets', 'list', '--provider', provider, '--json']);
    expect(listed.stdout).not.toContain('whsec_');
    expect(listed.json.map((s: { id: string; state: string }) => [s.id, s.state])).toEqual([
      [added.json.id, 'expiring'],
      [humanId, 'revoked'],
      [rotated.json.id, 'active'],
    ]);
    expect(Object.keys(listed.json[0]).sort()).toEqual(['created_at', 'expires_at', 'id', 'provider', 'revoked_at', 'state']);

    // Both verify during the overlap; once the old one is revoked only the new one does.
    expect((await deliver(provider, depositEvent(tenant, { amount: 20 }), { secrets: [firstSecret] })).status).toBe(200);
    expect((await deliver(provider, depositEvent(tenant, { amount: 40 }), { secrets: [secondSecret] })).status).toBe(200);
    const revoked = await runCli(['webhook-secrets', 'revoke', added.json.id, '--json']);
    expect(revoked.code, revoked.stderr).toBe(0);
    expect(revoked.json).toMatchObject({ id: added.json.id, state: 'revoked' });
    expect(revoked.stdout).not.toContain('whsec_');
    expect((await deliver(provider, depositEvent(tenant, { amount: 80 }), { secrets: [firstSecret] })).status).toBe(401);
    expect((await deliver(provider, depositEvent(tenant, { amount: 160 }), { secrets: [secondSecret] })).status).toBe(200);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(10_000 + 10 + 20 + 40 + 160);
  }, cliTestTimeoutMs);

  it('refuses bad arguments with exit 2 and unknown ids with exit 3, creating nothing', async () => {
    const provider = newProvider('clibad');
    const bad: Array<[string[], number, RegExp]> = [
      [['webhook-secrets', 'add', 'Bad Name', '--json'], 2, /<provider>/],
      [['webhook-secrets', 'rotate', provider, '--overlap-seconds', 'soon', '--json'], 2, /--overlap-seconds/],
      [['webhook-secrets', 'rotate', provider, '--json'], 3, /has no current secret to rotate/],
      [['webhook-secrets', 'revoke', 'whk_0000000000000000', '--json'], 3, /no webhook secret whk_0000000000000000/],
    ];
    // One at a time: each is a Node process with a TypeScript loader, and the machine is shared.
    for (const [args, code, detail] of bad) {
      const result = await runCli(args);
      expect(result.code, `${args.join(' ')}: ${result.stdout} ${result.stderr}`).toBe(code);
      expect(JSON.stringify(result.json.error), args.join(' ')).toMatch(detail);
    }
    const listed = await runCli(['webhook-secrets', 'list', '--provider', provider, '--json']);
    expect(listed.json).toEqual([]);
  }, cliTestTimeoutMs);
});

describe('the OpenAPI document', () => {
  it('lists the webhook route without API-key security', async () => {
    const document = (await api.request('/openapi.json')).body;
    const operation = document.paths['/v1/webhooks/{provider}'].post;
    expect(operation.security).toEqual([]);
    expect(Object.keys(operation.responses).sort()).toEqual(['200', '400', '401', '404', '413', '415', '422', '429', '503']);
    expect(operation.parameters).toContainEqual(expect.objectContaining({ in: 'header', name: 'chargeguard-signature', required: true }));
    expect(operation.requestBody.content['application/json'].schema.properties.data.required).toEqual(['tenant', 'account_id', 'amount_minor', 'currency']);
  });
});
