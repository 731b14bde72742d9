import { constants, createHmac, createPublicKey, verify } from 'node:crypto';
import { parseDictionary, type InnerList } from 'structured-headers';
import { describe, expect, it } from 'vitest';
import {
  contentDigestOf,
  signatureBaseOf,
  signatureLimits,
  verifyRequestSignature,
  type SignedRequest,
} from '../src/auth/request-signatures.js';
import { signRequest } from '../src/client/sign-request.js';

// The test request of RFC 9421 Appendix B.2 and the keys of B.1, as the RFC publishes them.
const rfcRequest = {
  method: 'POST',
  targetUri: 'https://example.com/foo?param=Value&Pet=dog',
  headers: {
    host: 'example.com',
    date: 'Tue, 20 Apr 2021 02:07:55 GMT',
    'content-type': 'application/json',
    'content-digest': 'sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:',
    'content-length': '18',
  },
};
const rfcBody = '{"hello": "world"}';

/** B.1.2 test-key-rsa-pss (public). */
const rsaPssPublicKey = createPublicKey(`-----BEGIN PUBLIC KEY-----
MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAr4tmm3r20Wd/PbqvP1s2
+QEtvpuRaV8Yq40gjUR8y2Rjxa6dpG2GXHbPfvMs8ct+Lh1GH45x28Rw3Ry53mm+
oAXjyQ86OnDkZ5N8lYbggD4O3w6M6pAvLkhk95AndTrifbIFPNU8PPMO7OyrFAHq
gDsznjPFmTOtCEcN2Z1FpWgchwuYLPL+Wokqltd11nqqzi+bJ9cvSKADYdUAAN5W
Utzdpiy6LbTgSxP7ociU4Tn0g5I6aDZJ7A8Lzo0KSyZYoA485mqcO0GVAdVw9lq4
aOT9v6d+nb4bnNkQVklLQ3fVAvJm+xdDOp9LCNCN48V2pnDOkFV6+U9nV5oyc6XI
2wIDAQAB
-----END PUBLIC KEY-----`);
/** B.1.4 test-key-ed25519 (public). */
const ed25519PublicKey = createPublicKey(`-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAJrQLj5P/89iXES9+vFgrIy29clF9CC/oPPsw3c5D0bs=
-----END PUBLIC KEY-----`);
/** B.1.5 test-shared-secret: 64 bytes, given in base64. */
const sharedSecret = Buffer.from('uzvJfB4u3N0Jy4T7NZ75MDVcr8zSTInedJtkgcu46YW4XByzNJjxBdtjUkdJPBtbmHhIDi6pcl8jsasjlTMtDQ==', 'base64');

function member(signatureInput: string): InnerList {
  return parseDictionary(`sig=${signatureInput}`).get('sig') as InnerList;
}

const digest = rfcRequest.headers['content-digest'];

describe('signature base (RFC 9421 section 2.5) against the RFC test vectors', () => {
  it('RFC 9530 Content-Digest of the test body', () => {
    expect(contentDigestOf(rfcBody)).toBe('sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:');
  });

  it('section 2.5 figure 1: the base of the example request', () => {
    const input = '("@method" "@authority" "@path" "content-digest" "content-length" "content-type");created=1618884473;keyid="test-key-rsa-pss"';
    expect(signatureBaseOf(rfcRequest, member(input))).toBe(
      [
        '"@method": POST',
        '"@authority": example.com',
        '"@path": /foo',
        `"content-digest": ${digest}`,
        '"content-length": 18',
        '"content-type": application/json',
        `"@signature-params": ${input}`,
      ].join('\n'),
    );
  });

  it('B.2.5 hmac-sha256 with the shared secret: the published base and the published signature', () => {
    const input = '("date" "@authority" "content-type");created=1618884473;keyid="test-shared-secret"';
    const base = signatureBaseOf(rfcRequest, member(input));
    expect(base).toBe(
      ['"date": Tue, 20 Apr 2021 02:07:55 GMT', '"@authority": example.com', '"content-type": application/json', `"@signature-params": ${input}`].join('\n'),
    );
    expect(createHmac('sha256', sharedSecret).update(base).digest('base64')).toBe('pxcQw6G3AjtMBQjwo8XzkZf/bws5LelbaMk5rGIGtE8=');
    // A one-character change of the base changes the MAC: the comparison above can fail.
    expect(createHmac('sha256', sharedSecret).update(`${base} `).digest('base64')).not.toBe('pxcQw6G3AjtMBQjwo8XzkZf/bws5LelbaMk5rGIGtE8=');
  });

  it('B.2.6 ed25519: the published signature verifies over the base built here (@method, @path)', () => {
    const input = '("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519"';
    const base = signatureBaseOf(rfcRequest, member(input));
    const signature = Buffer.from('wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==', 'base64');
    expect(verify(null, Buffer.from(base), ed25519PublicKey, signature)).toBe(true);
    expect(verify(null, Buffer.from(base.replace('POST', 'PUT')), ed25519PublicKey, signature)).toBe(false);
  });

  it('B.2.2 and B.2.3 rsa-pss-sha512: the published signatures verify over the bases built here (@query-param, @query, tag)', () => {
    const cases = [
      {
        input: '("@authority" "content-digest" "@query-param";name="Pet");created=1618884473;keyid="test-key-rsa-pss";tag="header-example"',
        signature:
          'LjbtqUbfmvjj5C5kr1Ugj4PmLYvx9wVjZvD9GsTT4F7GrcQEdJzgI9qHxICagShLRiLMlAJjtq6N4CDfKtjvuJyE5qH7KT8UCMkSowOB4+ECxCmT8rtAmj/0PIXxi0A0nxKyB09RNrCQibbUjsLS/2YyFYXEu4TRJQzRw1rLEuEfY17SARYhpTlaqwZVtR8NV7+4UKkjqpcAoFqWFQh62s7Cl+H2fjBSpqfZUJcsIk4N6wiKYd4je2U/lankenQ99PZfB4jY3I5rSV2DSBVkSFsURIjYErOs0tFTQosMTAoxk//0RoKUqiYY8Bh0aaUEb0rQl3/XaVe4bXTugEjHSw==',
      },
      {
        input:
          '("date" "@method" "@path" "@query" "@authority" "content-type" "content-digest" "content-length");created=1618884473;keyid="test-key-rsa-pss"',
        signature:
          'bbN8oArOxYoyylQQUU6QYwrTuaxLwjAC9fbY2F6SVWvh0yBiMIRGOnMYwZ/5MR6fb0Kh1rIRASVxFkeGt683+qRpRRU5p2voTp768ZrCUb38K0fUxN0O0iC59DzYx8DFll5GmydPxSmme9v6ULbMFkl+V5B1TP/yPViV7KsLNmvKiLJH1pFkh/aYA2HXXZzNBXmIkoQoLd7YfW91kE9o/CCoC1xMy7JA1ipwvKvfrs65ldmlu9bpG6A9BmzhuzF8Eim5f8ui9eH8LZH896+QIF61ka39VBrohr9iyMUJpvRX2Zbhl5ZJzSRxpJyoEZAFL2FUo5fTIztsDZKEgM4cUA==',
      },
    ];
    for (const { input, signature } of cases) {
      const base = signatureBaseOf(rfcRequest, member(input));
      const key = { key: rsaPssPublicKey, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: 64 };
      expect(verify('sha512', Buffer.from(base), key, Buffer.from(signature, 'base64')), input).toBe(true);
      expect(verify('sha512', Buffer.from(`${base}x`), key, Buffer.from(signature, 'base64')), input).toBe(false);
    }
  });

  it('a covered header the request lacks cannot make a base', () => {
    expect(() => signatureBaseOf(rfcRequest, member('("idempotency-key");created=1'))).toThrow(/idempotency-key/);
  });
});

describe('verifyRequestSignature (no database: the nonce is consumed separately)', () => {
  const key = { keyId: 'key_0123456789abcdef', secret: 'cgsig_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' };
  const url = 'http://127.0.0.1:8080/v1/charges';
  const body = '{"order_id":"1","payer_account_id":"payer","payee_account_id":"payee","amount":100,"currency":"USD"}';
  const nowMs = 1_800_000_000_000;
  const created = nowMs / 1000;

  function signed(overrides: { body?: string; headers?: Record<string, string>; components?: string[]; created?: number; secret?: string; keyId?: string } = {}): SignedRequest {
    const headers = { 'idempotency-key': 'order-1', ...overrides.headers };
    const added = signRequest({
      method: 'POST',
      url,
      headers,
      body,
      keyId: overrides.keyId ?? key.keyId,
      secret: overrides.secret ?? key.secret,
      nonce: 'n-1',
      created: overrides.created ?? created,
      ...(overrides.components ? { components: overrides.components } : {}),
    });
    return { method: 'POST', targetUri: url, headers: { ...headers, ...added }, body: Buffer.from(overrides.body ?? body) };
  }

  it('the client helper and the verifier agree (two implementations of the base)', () => {
    const verified = verifyRequestSignature(signed(), key, nowMs);
    expect(verified).toMatchObject({ label: 'sig1', nonce: 'n-1', createdSeconds: created });
    const window = signatureLimits.signatureMaxSkewSeconds + signatureLimits.signatureNonceRetentionMarginSeconds;
    expect(verified.nonceExpiresAt.getTime()).toBe((created + window) * 1000);
  });

  it('each failure names its reason', () => {
    const refusals: Array<[string, () => unknown, RegExp]> = [
      ['no headers', () => verifyRequestSignature({ method: 'GET', targetUri: url, headers: {}, body: undefined }, key, nowMs), /requires signed requests/],
      ['tampered body', () => verifyRequestSignature(signed({ body: body.replace('100', '900') }), key, nowMs), /Content-Digest sha-256 does not match the body/],
      ['stale', () => verifyRequestSignature(signed({ created: created - 301 }), key, nowMs), /created is 301 s old; .*300 s \(signatureMaxSkewSeconds\)/],
      ['future', () => verifyRequestSignature(signed({ created: created + 301 }), key, nowMs), /created is 301 s in the future/],
      ['uncovered idempotency key', () => verifyRequestSignature(signed({ components: ['@method', '@target-uri', 'content-digest'] }), key, nowMs), /does not cover idempotency-key/],
      [
        'uncovered idempotency token',
        () => {
          const request = signed({ headers: { 'idempotency-token': 'idt_x' }, components: ['@method', '@target-uri', 'content-digest', 'idempotency-key'] });
          return verifyRequestSignature(request, key, nowMs);
        },
        /does not cover idempotency-token; it must cover @method, @target-uri, content-digest, idempotency-key, idempotency-token/,
      ],
      ['wrong secret', () => verifyRequestSignature(signed({ secret: `${key.secret.slice(0, -1)}B` }), key, nowMs), /signature does not match/],
      ['other keyid', () => verifyRequestSignature(signed({ keyId: 'key_ffffffffffffffff' }), key, nowMs), /no Signature-Input member has keyid "key_0123456789abcdef".*"key_ffffffffffffffff"/],
    ];
    for (const [what, attempt, reason] of refusals) expect(attempt, what).toThrow(reason);
    // Exactly at the limit is still accepted.
    expect(verifyRequestSignature(signed({ created: created - 300 }), key, nowMs).nonce).toBe('n-1');
  });

  it('measures the verification itself (printed, not asserted)', () => {
    const request = signed();
    const samples: number[] = [];
    for (let i = 0; i < 2_000; i += 1) {
      const started = process.hrtime.bigint();
      verifyRequestSignature(request, key, nowMs);
      samples.push(Number(process.hrtime.bigint() - started) / 1_000);
    }
    samples.sort((a, b) => a - b);
    const at = (q: number) => samples[Math.floor(q * (samples.length - 1))]!.toFixed(1);
    console.log(`verifyRequestSignature over ${samples.length} runs: p50 ${at(0.5)} µs, p90 ${at(0.9)} µs, p99 ${at(0.99)} µs`);
    expect(samples.length).toBe(2_000);
  });
});
