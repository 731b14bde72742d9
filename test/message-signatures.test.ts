import { describe, expect, it } from 'vitest';
import { messageSignatureBase, messageSignatureLimits, MessageSignatureError, signMessage, verifyMessageSignature, type ReceivedMessage } from '../src/auth/message-signatures.js';

const secret = 'cgsig_test-secret';
const nowMs = 1_764_316_800_000;
const created = nowMs / 1000;

function received(overrides: Partial<ReceivedMessage> & { sign?: Partial<Parameters<typeof signMessage>[0]> } = {}): ReceivedMessage {
  const value = Buffer.from('{"amount":100}');
  const headers = signMessage({ keyId: 'key_ab', createdSeconds: created, topic: 'requests', key: 'k-1', value, ...overrides.sign }, secret);
  return { topic: 'requests', key: 'k-1', value, headers: new Map(Object.entries(headers)), ...overrides };
}

function reasonOf(message: ReceivedMessage, at = nowMs, signingSecret = secret): string | null {
  try {
    verifyMessageSignature(message, 'key_ab', signingSecret, at);
    return null;
  } catch (error) {
    if (error instanceof MessageSignatureError) return error.reason;
    throw error;
  }
}

describe('queue message signatures (HMAC-SHA256 over key id, created, topic, key and value digest)', () => {
  it('the base is six lines, the value by its SHA-256; a producer in another language can rebuild it', () => {
    expect(messageSignatureBase({ keyId: 'key_ab', createdSeconds: 1, topic: 't', key: 'k', value: '' })).toBe(
      'chargeguard-message-v1\nkey_ab\n1\nt\nk\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=',
    );
  });

  it('accepts the message as signed, and refuses any change of topic, key, value, time or secret', () => {
    expect(reasonOf(received())).toBeNull();
    expect(reasonOf(received({ topic: 'elsewhere' }))).toBe('bad_signature');
    expect(reasonOf(received({ key: 'k-2' }))).toBe('bad_signature');
    expect(reasonOf(received({ value: Buffer.from('{"amount":900}') }))).toBe('bad_signature');
    const moved = received();
    (moved.headers as Map<string, string>).set('cg-created', String(created + 1));
    expect(reasonOf(moved)).toBe('bad_signature');
    expect(reasonOf(received(), nowMs, 'cgsig_other')).toBe('bad_signature');
  });

  it('a redelivery days later is accepted within the age limit; older is stale, the future beyond the skew refused', () => {
    expect(reasonOf(received(), nowMs + 3 * 24 * 3600 * 1000)).toBeNull();
    expect(reasonOf(received(), nowMs + (messageSignatureLimits.maxMessageAgeSeconds + 1) * 1000)).toBe('stale');
    expect(reasonOf(received(), nowMs - (messageSignatureLimits.maxFutureSkewSeconds - 1) * 1000)).toBeNull();
    expect(reasonOf(received(), nowMs - (messageSignatureLimits.maxFutureSkewSeconds + 1) * 1000)).toBe('future');
  });

  it('missing or malformed headers are named', () => {
    const unsigned = received();
    (unsigned.headers as Map<string, string>).delete('cg-signature');
    expect(reasonOf(unsigned)).toBe('unsigned');
    const garbled = received();
    (garbled.headers as Map<string, string>).set('cg-signature', 'sha256=abc');
    expect(reasonOf(garbled)).toBe('bad_signature');
  });
});
