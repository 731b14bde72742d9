import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { describe, expect, it } from 'vitest';
import { createApiKey } from '../src/auth/api-keys.js';
import { signatureLimits } from '../src/auth/request-signatures.js';
import { signRequest, type SignRequestInput } from '../src/client/sign-request.js';
import { chargeWorkflowId } from '../src/domain/charge.js';
import { noMandate } from '../src/domain/mandate.js';
import { countLedger } from '../src/ledger/reports.js';
import { countSignatureNonces } from '../src/ledger/signature-nonces.js';
import { useApi, type TestResponse } from './support/api.js';
import { runCli } from './support/cli.js';
import { callTool, structured } from './support/mcp.js';
import { chargeBody, expectLedgerInvariants, fundedTenant, newKey, useHarness, workflowExists } from './support/harness.js';

const h = useHarness();
const api = useApi();

interface SignedKey {
  tenant: string;
  key: string;
  keyId: string;
  secret: string;
}

async function signedKey(label: string): Promise<SignedKey> {
  const tenant = await fundedTenant(h, { label });
  const { key, record, signingSecret } = await createApiKey(h.pool, tenant, 'signed agent', 'agent', noMandate, { requireSignature: true });
  expect(signingSecret).toMatch(/^cgsig_[A-Za-z0-9_-]{43}$/);
  return { tenant, key, keyId: record.id, secret: signingSecret! };
}

interface Send {
  method?: string;
  path: string;
  body?: string;
  headers?: Record<string, string>;
}

/** The headers of a request as signRequest signs it; `sign` overrides what is signed (to sign something else than what is sent). */
function signedHeaders(k: SignedKey, request: Send, sign: Partial<SignRequestInput> = {}): Record<string, string> {
  const headers = request.headers ?? {};
  const added = signRequest({
    method: request.method ?? 'POST',
    url: `${api.baseUrl}${request.path}`,
    headers,
    ...(request.body !== undefined ? { body: request.body } : {}),
    keyId: k.keyId,
    secret: k.secret,
    ...sign,
  });
  return { ...headers, ...added };
}

function send(k: SignedKey, request: Send, headers: Record<string, string>): Promise<TestResponse> {
  return api.request(request.path, {
    method: request.method ?? 'POST',
    ...(request.body !== undefined ? { rawBody: request.body } : {}),
    headers,
    apiKey: k.key,
  });
}

function chargeRequest(idempotencyKey: string, body: Record<string, unknown> = chargeBody()): Send {
  return { path: '/v1/charges', body: JSON.stringify(body), headers: { 'idempotency-key': idempotencyKey } };
}

function expectRefused(response: TestResponse, reason: RegExp): void {
  expect(response.status, response.text).toBe(401);
  expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  expect(response.body).toMatchObject({ type: 'unauthorized', status: 401 });
  expect(response.body.detail).toMatch(/^request signature refused: /);
  expect(response.body.detail).toMatch(reason);
}

describe('signed requests (RFC 9421 hmac-sha256) for keys created with --require-signature', () => {
  it('a signed charge is created (201); with a new nonce it replays (200); verbatim (same nonce) it is refused and records nothing', async () => {
    const k = await signedKey('sig-ok');
    const request = chargeRequest(newKey('signed'));
    const headers = signedHeaders(k, request);
    const created = await send(k, request, headers);
    expect(created.status, created.text).toBe(201);
    expect(created.body.status).toBe('succeeded');

    const replay = await send(k, request, signedHeaders(k, request));
    expect(replay.status, replay.text).toBe(200);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body).toEqual(created.body);

    const before = await countLedger(h.pool, k.tenant);
    const noncesBefore = await countSignatureNonces(h.pool, k.keyId);
    expect(noncesBefore).toBe(2);
    const verbatim = await send(k, request, headers);
    expectRefused(verbatim, /nonce ".+" was already used by this key/);
    expect(await countLedger(h.pool, k.tenant)).toEqual(before);
    expect(await countSignatureNonces(h.pool, k.keyId)).toBe(noncesBefore);
    await expectLedgerInvariants(h.pool, k.tenant);
  });

  it('every other failure is a 401 naming the reason, starts no charge, moves nothing and uses no nonce', async () => {
    const k = await signedKey('sig-refusals');
    // Read when the request is signed: on a busy machine a request may wait seconds to be sent.
    const nowSeconds = () => Math.floor(Date.now() / 1000);
    const maxSkew = signatureLimits.signatureMaxSkewSeconds;
    const cases: Array<{ what: string; reason: RegExp; make: (idempotencyKey: string) => { request: Send; headers: Record<string, string> } }> = [
      {
        what: 'unsigned',
        reason: /this API key requires signed requests/,
        make: (key) => ({ request: chargeRequest(key), headers: { 'idempotency-key': key } }),
      },
      {
        what: 'Signature without Signature-Input',
        reason: /missing Signature-Input header/,
        make: (key) => {
          const request = chargeRequest(key);
          const { 'signature-input': _input, ...headers } = signedHeaders(k, request);
          return { request, headers };
        },
      },
      {
        what: 'tampered body (digest mismatch)',
        reason: /Content-Digest sha-256 does not match the body/,
        make: (key) => {
          const request = chargeRequest(key, chargeBody({ amount: 100 }));
          const headers = signedHeaders(k, request);
          return { request: { ...request, body: JSON.stringify(chargeBody({ amount: 9_000 })) }, headers };
        },
      },
      {
        what: 'tampered body and digest with the old signature',
        reason: /the signature does not match/,
        make: (key) => {
          const request = chargeRequest(key, chargeBody({ amount: 100 }));
          const signed = signedHeaders(k, request);
          const tampered = { ...request, body: JSON.stringify(chargeBody({ amount: 9_000 })) };
          const redigested = signedHeaders(k, tampered)['content-digest']!;
          return { request: tampered, headers: { ...signed, 'content-digest': redigested } };
        },
      },
      {
        what: 'signed for another method',
        reason: /the signature does not match/,
        make: (key) => {
          const request = chargeRequest(key);
          return { request, headers: signedHeaders(k, request, { method: 'PUT' }) };
        },
      },
      {
        what: 'signed for another path',
        reason: /the signature does not match/,
        make: (key) => {
          const request = chargeRequest(key);
          return { request, headers: signedHeaders(k, request, { url: `${api.baseUrl}/v1/charges/${key}/capture` }) };
        },
      },
      {
        what: 'signed for another idempotency key',
        reason: /the signature does not match/,
        make: (key) => {
          const request = chargeRequest(key);
          const signed = signedHeaders(k, chargeRequest(`${key}-other`, JSON.parse(request.body!)));
          return { request, headers: { ...signed, 'idempotency-key': key } };
        },
      },
      {
        what: 'created 301 s ago',
        reason: new RegExp(`created is 3\\d\\d s old; a signature is accepted for ${maxSkew} s \\(signatureMaxSkewSeconds\\)`),
        make: (key) => {
          const request = chargeRequest(key);
          return { request, headers: signedHeaders(k, request, { created: nowSeconds() - (maxSkew + 1) }) };
        },
      },
      {
        what: 'created 301 s ahead',
        reason: /created is 3\d\d s in the future; clocks may differ by at most 300 s/,
        make: (key) => {
          const request = chargeRequest(key);
          return { request, headers: signedHeaders(k, request, { created: nowSeconds() + maxSkew + 2 }) };
        },
      },
      {
        what: 'idempotency-key not covered',
        reason: /the signature does not cover idempotency-key; it must cover @method, @target-uri, content-digest, idempotency-key/,
        make: (key) => {
          const request = chargeRequest(key);
          return { request, headers: signedHeaders(k, request, { components: ['@method', '@target-uri', 'content-digest'] }) };
        },
      },
      {
        what: 'content-digest not covered',
        reason: /the signature does not cover content-digest/,
        make: (key) => {
          const request = chargeRequest(key);
          return { request, headers: signedHeaders(k, request, { components: ['@method', '@target-uri', 'idempotency-key'] }) };
        },
      },
      {
        what: 'wrong secret',
        reason: /the signature does not match: signed with another secret/,
        make: (key) => {
          const request = chargeRequest(key);
          return { request, headers: signedHeaders(k, request, { secret: 'cgsig_' + 'x'.repeat(43) }) };
        },
      },
      {
        what: 'unknown keyid',
        reason: new RegExp(`no Signature-Input member has keyid "${k.keyId}" \\(this API key's id\\); found keyid "key_0000000000000000"`),
        make: (key) => {
          const request = chargeRequest(key);
          return { request, headers: signedHeaders(k, request, { keyId: 'key_0000000000000000' }) };
        },
      },
    ];

    const before = await countLedger(h.pool, k.tenant);
    for (const attempt of cases) {
      const idempotencyKey = newKey('refused');
      const { request, headers } = attempt.make(idempotencyKey);
      expectRefused(await send(k, request, headers), attempt.reason);
      expect(await workflowExists(h, chargeWorkflowId(k.tenant, idempotencyKey)), attempt.what).toBe(false);
    }
    expect(await countLedger(h.pool, k.tenant)).toEqual(before);
    expect(await countSignatureNonces(h.pool, k.keyId)).toBe(0);

    // The same key signing properly still works: none of the refusals broke it.
    const request = chargeRequest(newKey('after'));
    expect((await send(k, request, signedHeaders(k, request))).status).toBe(201);
  });

  it('20 concurrent sends of one signed request (one nonce): exactly one is accepted', async () => {
    const k = await signedKey('sig-race');
    const idempotencyKey = newKey('race');
    const request = chargeRequest(idempotencyKey, chargeBody({ amount: 700 }));
    const headers = signedHeaders(k, request);
    const responses = await Promise.all(Array.from({ length: 20 }, () => send(k, request, headers)));
    const statuses = responses.map((r) => r.status);
    expect(statuses.filter((s) => s === 201 || s === 200 || s === 202)).toHaveLength(1);
    const refused = responses.filter((r) => r.status === 401);
    expect(refused).toHaveLength(19);
    for (const r of refused) expect(r.body.detail).toMatch(/was already used by this key/);
    expect(await countSignatureNonces(h.pool, k.keyId)).toBe(1);
    const counts = await countLedger(h.pool, k.tenant);
    expect(counts.charges).toBe(1);
    await expectLedgerInvariants(h.pool, k.tenant);
  });

  it('reads are signed too (content-digest of the empty body, no idempotency-key); keys without --require-signature ignore signatures', async () => {
    const k = await signedKey('sig-read');
    const read = { method: 'GET', path: '/v1/accounts/payer' };
    const ok = await send(k, read, signedHeaders(k, read));
    expect(ok.status, ok.text).toBe(200);
    expect(ok.body.id).toBe('payer');
    expectRefused(await send(k, read, {}), /requires signed requests/);

    // An ordinary key: no secret to check against, so a signature (even a wrong one) is ignored.
    const plain = await api.keyFor(k.tenant);
    const request = chargeRequest(newKey('plain'));
    const bogus = signedHeaders({ ...k, secret: 'cgsig_' + 'y'.repeat(43) }, request);
    const created = await api.request(request.path, { rawBody: request.body!, headers: bogus, apiKey: plain });
    expect(created.status, created.text).toBe(201);
  });

  it('MCP over HTTP: every POST is verified the same way (no idempotency-key needed); unsigned, the client cannot connect', async () => {
    const k = await signedKey('sig-mcp');
    const signingFetch = async (url: string | URL, init?: RequestInit): Promise<Response> => {
      const headers = new Headers(init?.headers);
      const body = typeof init?.body === 'string' ? init.body : undefined;
      const method = init?.method ?? 'GET';
      const added = signRequest({ method, url: url.toString(), ...(body !== undefined ? { body } : {}), keyId: k.keyId, secret: k.secret });
      for (const [name, value] of Object.entries(added)) headers.set(name, value);
      return fetch(url, { ...init, headers });
    };
    const transport = new StreamableHTTPClientTransport(new URL(`${api.baseUrl}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${k.key}` } },
      fetch: signingFetch,
    });
    const client = new Client({ name: 'chargeguard-signed-test', version: '1.0.0' });
    await client.connect(transport);
    try {
      const args = { idempotency_key: newKey('mcp-signed'), ...chargeBody({ amount: 300 }) };
      expect(structured(await callTool(client, 'create_charge', args))).toMatchObject({ replayed: false, charge: { status: 'succeeded', amount: 300 } });
      expect(structured(await callTool(client, 'create_charge', args)).replayed).toBe(true);
    } finally {
      await client.close();
    }
    const nonces = await countSignatureNonces(h.pool, k.keyId);
    expect(nonces).toBeGreaterThanOrEqual(3);

    // The same body posted unsigned: 401 before the MCP server sees it.
    const unsigned = await api.request('/mcp', {
      rawBody: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
      headers: { accept: 'application/json, text/event-stream' },
      apiKey: k.key,
    });
    expectRefused(unsigned, /requires signed requests/);
    const tampered = { path: '/mcp', body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }), headers: { accept: 'application/json, text/event-stream' } };
    const signed = signedHeaders(k, tampered);
    expectRefused(await send(k, { ...tampered, body: tampered.body.replace('"id":1', '"id":2') }, signed), /Content-Digest sha-256 does not match the body/);
    expect(await countSignatureNonces(h.pool, k.keyId)).toBe(nonces);
  });

  it('expired nonces are pruned by later verifications; an expired nonce may be used again', async () => {
    const k = await signedKey('sig-prune');
    // Rows of a window long gone (as if written an hour ago), one of them with the nonce reused below.
    await h.pool.query(
      `INSERT INTO signature_nonces (key_id, nonce, expires_at)
       SELECT $1, 'old-' || n, now() - interval '1 hour' FROM generate_series(1, 5) AS n`,
      [k.keyId],
    );
    const request = chargeRequest(newKey('prune'));
    const response = await send(k, request, signedHeaders(k, request, { nonce: 'old-1' }));
    expect(response.status, response.text).toBe(201);
    const rows = await h.pool.query<{ nonce: string; live: boolean }>(
      'SELECT nonce, expires_at > now() AS live FROM signature_nonces WHERE key_id = $1',
      [k.keyId],
    );
    // The five expired rows went (at most signatureNoncePruneBatch per verification: 16); old-1 lives again.
    expect(rows.rows).toEqual([{ nonce: 'old-1', live: true }]);
  });

  // Three CLI processes (tsx each): slow on a busy machine, hence the longer timeout.
  it('the CLI creates a key with --require-signature, prints the secret once, and list/show say signatures are required', { timeout: 300_000 }, async () => {
    const tenant = await fundedTenant(h, { label: 'sig-cli' });
    const created = await runCli(['api-keys', 'create', '--tenant', tenant, '--label', 'signer', '--require-signature']);
    expect(created.code, created.stderr).toBe(0);
    const [keyLine, secretLine, note] = created.stdout.trim().split('\n');
    expect(keyLine).toMatch(/^cgk_/);
    expect(secretLine).toMatch(/^cgsig_[A-Za-z0-9_-]{43}$/);
    expect(note).toMatch(/signed requests required: store the key and its signing secret/);
    const keyId = /^\((key_[0-9a-f]+),/.exec(note!)?.[1];
    expect(keyId).toBeDefined();

    await api.keyFor(tenant);
    const show = await runCli(['api-keys', 'show', keyId!]);
    expect(show.stdout).toMatch(/signatures required/);
    expect(show.stdout).not.toContain(secretLine);
    const listed = await runCli(['api-keys', 'list', '--tenant', tenant, '--json']);
    expect(listed.json.map((key: { id: string; require_signature: boolean }) => [key.id === keyId, key.require_signature])).toEqual([
      [true, true],
      [false, false],
    ]);
    expect(JSON.stringify(listed.json)).not.toContain('cgsig_');

    // The key and secret the CLI printed sign a request the API accepts.
    const k = { tenant, key: keyLine!, keyId: keyId!, secret: secretLine! };
    const request = chargeRequest(newKey('cli'));
    expect((await send(k, request, signedHeaders(k, request))).status).toBe(201);
  });

  it('replays and reads signed afresh, alternating with unsigned ones of the same tenant: every one answered 200, every signed one records its nonce', async () => {
    const k = await signedKey('sig-many');
    const plainKey = await api.keyFor(k.tenant);
    // What signing costs a request is a benchmark's question (npm run bench:front-door: replays
    // signed and unsigned in alternating rounds, and the verification with its nonce insert alone);
    // here, enough requests that each signed one must have recorded a nonce of its own.
    const requestCount = 30;
    const request = chargeRequest(newKey('many'));
    expect((await send(k, request, signedHeaders(k, request))).status).toBe(201);

    const alternate = async (unsigned: () => Promise<TestResponse>, signed: () => Promise<TestResponse>) => {
      for (let i = 0; i < requestCount; i += 1) {
        for (const sendOne of [unsigned, signed]) {
          const response = await sendOne();
          if (response.status !== 200) throw new Error(`answered ${response.status}: ${response.text}`);
        }
      }
    };
    await alternate(
      () => api.request(request.path, { rawBody: request.body!, headers: request.headers!, apiKey: plainKey }),
      () => send(k, request, signedHeaders(k, request)),
    );
    const read = { method: 'GET', path: '/v1/accounts/payer' };
    await alternate(
      () => api.request(read.path, { apiKey: plainKey }),
      () => send(k, read, signedHeaders(k, read)),
    );
    expect(await countSignatureNonces(h.pool, k.keyId)).toBe(2 * requestCount + 1);
  });
});
