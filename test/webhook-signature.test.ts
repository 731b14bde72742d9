import { describe, expect, it } from 'vitest';
import {
  parseSignatureHeader,
  signWebhookPayload,
  verifyWebhookSignature,
  webhookMaxSignatures,
  webhookSignatureHeaderValue,
  webhookToleranceSeconds,
  type ParsedSignatureHeader,
} from '../src/domain/webhook-signature.js';

// The documented example (docs/webhooks.md), checked against
// `printf '%s' "$t.$body" | openssl dgst -sha256 -hmac "$secret" -hex`.
const secret = 'whsec_0123456789abcdefghijklmnopqrstuvwxyzABCDEFG';
const t = 1_764_000_000;
const body = '{"id":"evt_1","type":"deposit.succeeded","data":{"tenant":"acme","account_id":"payer","amount_minor":2500,"currency":"USD"}}';
const opensslSignature = '8a4f76fe874818a05d8e98efc5c42bf28ac32506b08136484584ac01829fb472';
const nowMs = t * 1000;

function parsed(header: string): ParsedSignatureHeader {
  const result = parseSignatureHeader(header);
  if ('reason' in result) throw new Error(`expected ${header} to parse: ${result.message}`);
  return result;
}

const secrets = (...values: string[]) => values.map((value, index) => ({ id: `whk_${index}`, secret: value }));

describe('Chargeguard-Signature: the header', () => {
  it('reads t and every v1, skips other schemes, tolerates spaces', () => {
    const other = 'a'.repeat(64);
    const header = parsed(` t=${t} , v1=${opensslSignature},v0=whatever, v1=${other.toUpperCase()}`);
    expect(header.timestampSeconds).toBe(t);
    expect(header.signatures.map((s) => s.toString('hex'))).toEqual([opensslSignature, other]);
  });

  it.each([
    ['', 'missing', /no Chargeguard-Signature header/],
    ['   ', 'missing', /no Chargeguard-Signature header/],
    [`v1=${opensslSignature}`, 'malformed', /t is missing/],
    [`t=${t}`, 'malformed', /no v1 signature/],
    [`t=${t},t=${t},v1=${opensslSignature}`, 'malformed', /t is given twice/],
    [`t=1.5,v1=${opensslSignature}`, 'malformed', /t must be whole unix seconds/],
    [`t=-5,v1=${opensslSignature}`, 'malformed', /t must be whole unix seconds/],
    [`t=1234567890123,v1=${opensslSignature}`, 'malformed', /t must be whole unix seconds/],
    [`t=${t},v1=${opensslSignature.slice(2)}`, 'malformed', /each v1 must be 64 hex digits/],
    [`t=${t},v1=${'g'.repeat(64)}`, 'malformed', /each v1 must be 64 hex digits/],
    [`t=${t},v1=${opensslSignature};v1=x`, 'malformed', /each v1 must be 64 hex digits/],
    [`t=${t} v1=${opensslSignature}`, 'malformed', /t must be whole unix seconds/],
    [`t=${t},${opensslSignature}`, 'malformed', /is not key=value/],
    [`t=${t},V1=${opensslSignature}`, 'malformed', /"V1" is not a signature scheme name/],
    [`t=${t},${Array.from({ length: webhookMaxSignatures + 1 }, () => `v1=${opensslSignature}`).join(',')}`, 'malformed', /at most 8 v1 signatures/],
  ])('refuses %j as %s', (header, reason, message) => {
    const result = parseSignatureHeader(header);
    expect(result).toMatchObject({ reason });
    expect((result as { message: string }).message).toMatch(message);
  });

  it('refuses an absent header as missing', () => {
    expect(parseSignatureHeader(undefined)).toMatchObject({ reason: 'missing' });
  });
});

describe('Chargeguard-Signature: verification', () => {
  it('is HMAC-SHA256 over "<t>.<raw body>", as openssl computes it', () => {
    expect(signWebhookPayload(secret, t, body)).toBe(opensslSignature);
    expect(signWebhookPayload(secret, t, Buffer.from(body))).toBe(opensslSignature);
    expect(webhookSignatureHeaderValue([secret], t, body)).toBe(`t=${t},v1=${opensslSignature}`);
  });

  it('accepts the signed body and names the secret that signed it', () => {
    const found = verifyWebhookSignature(parsed(`t=${t},v1=${opensslSignature}`), Buffer.from(body), secrets('whsec_other', secret), nowMs);
    expect(found).toEqual({ secret: { id: 'whk_1', secret } });
  });

  it('any one valid v1 is enough; during a rotation either secret verifies', () => {
    const newSecret = 'whsec_new';
    const header = parsed(webhookSignatureHeaderValue(['whsec_unknown', newSecret], t, body));
    expect(verifyWebhookSignature(header, Buffer.from(body), secrets(secret, newSecret), nowMs)).toMatchObject({ secret: { secret: newSecret } });
    const oldOnly = parsed(webhookSignatureHeaderValue([secret], t, body));
    expect(verifyWebhookSignature(oldOnly, Buffer.from(body), secrets(secret, newSecret), nowMs)).toMatchObject({ secret: { secret } });
    expect(verifyWebhookSignature(oldOnly, Buffer.from(body), secrets(newSecret), nowMs)).toMatchObject({ reason: 'mismatch' });
  });

  it('refuses a tampered body, the same JSON re-serialised, another t, and no secret at all with one message', () => {
    const header = parsed(`t=${t},v1=${opensslSignature}`);
    const attempts: Array<[string, ParsedSignatureHeader, string, ReturnType<typeof secrets>]> = [
      ['amount changed', header, body.replace('2500', '25000'), secrets(secret)],
      ['spaces added', header, JSON.stringify(JSON.parse(body), null, 1), secrets(secret)],
      ['trailing newline', header, `${body}\n`, secrets(secret)],
      ['t changed', parsed(`t=${t + 1},v1=${opensslSignature}`), body, secrets(secret)],
      ['wrong secret', header, body, secrets(`${secret}x`)],
      ['no secret configured', header, body, []],
    ];
    const messages = new Set<string>();
    for (const [label, attemptHeader, attemptBody, attemptSecrets] of attempts) {
      const result = verifyWebhookSignature(attemptHeader, Buffer.from(attemptBody), attemptSecrets, nowMs);
      expect(result, label).toMatchObject({ reason: 'mismatch' });
      messages.add((result as { message: string }).message);
    }
    expect(messages.size).toBe(1);
    expect([...messages][0]).toMatch(/no v1 signature matches a current secret of this provider/);
  });

  it(`accepts t up to ${webhookToleranceSeconds} s away either way, refuses beyond, naming the tolerance`, () => {
    const at = (offsetSeconds: number) => {
      const when = t + offsetSeconds;
      return verifyWebhookSignature(parsed(webhookSignatureHeaderValue([secret], when, body)), Buffer.from(body), secrets(secret), nowMs);
    };
    expect(at(-300)).toHaveProperty('secret');
    expect(at(300)).toHaveProperty('secret');
    const stale = at(-301);
    expect(stale).toMatchObject({ reason: 'stale' });
    expect((stale as { message: string }).message).toMatch(/301 s old; signatures are accepted for 300 s \(webhookToleranceSeconds\)/);
    const future = at(301);
    expect(future).toMatchObject({ reason: 'future' });
    expect((future as { message: string }).message).toMatch(/301 s in the future; at most 300 s/);
  });

  it('a signature made for one provider secret does not verify another of the same length', () => {
    const a = `whsec_${'A'.repeat(43)}`;
    const b = `whsec_${'B'.repeat(43)}`;
    const header = parsed(webhookSignatureHeaderValue([a], t, body));
    expect(verifyWebhookSignature(header, Buffer.from(body), secrets(b), nowMs)).toMatchObject({ reason: 'mismatch' });
  });
});
