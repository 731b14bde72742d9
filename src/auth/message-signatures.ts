import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import { signingKeyById } from '../ledger/api-keys.js';
import type { LedgerPool } from '../ledger/pool.js';
import type { Principal } from './principal.js';

/**
 * Signed queue messages (docs/queues.md, The signature): a charge request on the intake topic is
 * signed with the signing secret of one of the tenant's API keys (a key created with
 * `--require-signature`, the same secret that signs its HTTP requests) by HMAC-SHA256 over
 *
 *     chargeguard-message-v1 \n <key id> \n <created> \n <topic> \n <message key> \n <base64 SHA-256 of the value>
 *
 * sent in three headers: `cg-key-id`, `cg-created` (seconds since the epoch) and `cg-signature`
 * (`v1=<base64 MAC>`). The topic is covered so a message signed for one topic cannot be moved to
 * another; the message key (the idempotency key) and the value's digest so neither can be changed.
 *
 * Why not RFC 9421 as HTTP requests are signed: a message has no method or URL, and its headers are
 * bytes, not structured fields; the same secret under a fixed, line-based base is easier to produce
 * from any Kafka client (docs/queues.md shows it in a few lines).
 *
 * Why no nonce and a long age window instead of ±300 s: a message is legitimately read hours after it
 * was produced (a consumer outage, a backlog, a group rebalance replays from the last commit), and a
 * redelivery must not be refused. A replay of a signed message can only make the request its
 * signature binds, under the idempotency key it binds: it attaches to the charge that key already
 * names and moves no money a second time. The idempotency key is the nonce.
 */

export const messageSignatureScheme = 'chargeguard-message-v1';

export const messageSignatureHeaders = {
  keyId: 'cg-key-id',
  created: 'cg-created',
  signature: 'cg-signature',
} as const;

export const messageSignatureLimits = {
  /**
   * How old a message may be when read, in seconds: 7 days, the broker's default retention
   * (log.retention.hours=168). Older ones are dead-lettered as stale rather than acted on.
   */
  maxMessageAgeSeconds: 7 * 24 * 3600,
  /** How far in the future `cg-created` may be (the producer's clock ahead of ours), in seconds. */
  maxFutureSkewSeconds: 300,
} as const;

/** Why a message can never be accepted: the dead letter's reason code. */
export class MessageSignatureError extends Error {
  constructor(
    readonly reason: 'unsigned' | 'bad_signature' | 'unknown_key' | 'revoked_key' | 'expired_key' | 'key_not_signing' | 'stale' | 'future',
    message: string,
  ) {
    super(message);
  }
}

export interface MessageToSign {
  keyId: string;
  createdSeconds: number;
  topic: string;
  key: string;
  value: Uint8Array | string;
}

export function messageSignatureBase(m: MessageToSign): string {
  const digest = createHash('sha256').update(m.value).digest('base64');
  return [messageSignatureScheme, m.keyId, String(m.createdSeconds), m.topic, m.key, digest].join('\n');
}

function macOf(secret: string, base: string): Buffer {
  return createHmac('sha256', Buffer.from(secret, 'utf8')).update(base, 'utf8').digest();
}

/** The three headers a producer sends with a charge request (what docs/queues.md shows). */
export function signMessage(m: MessageToSign, secret: string): Record<string, string> {
  return {
    [messageSignatureHeaders.keyId]: m.keyId,
    [messageSignatureHeaders.created]: String(m.createdSeconds),
    [messageSignatureHeaders.signature]: `v1=${macOf(secret, messageSignatureBase(m)).toString('base64')}`,
  };
}

export interface ReceivedMessage {
  topic: string;
  key: string;
  value: Uint8Array;
  /** Header names as received (lower case is what producers are told to send). */
  headers: ReadonlyMap<string, string>;
}

/** Pure: checks the signature against `secret` and the age against `nowMs`. Throws MessageSignatureError. */
export function verifyMessageSignature(message: ReceivedMessage, keyId: string, secret: string, nowMs: number): void {
  const createdText = message.headers.get(messageSignatureHeaders.created);
  const signatureText = message.headers.get(messageSignatureHeaders.signature);
  if (createdText === undefined || signatureText === undefined) {
    throw new MessageSignatureError('unsigned', `missing ${createdText === undefined ? messageSignatureHeaders.created : messageSignatureHeaders.signature} header`);
  }
  if (!/^[0-9]{1,12}$/.test(createdText)) throw new MessageSignatureError('bad_signature', `${messageSignatureHeaders.created} must be an integer (seconds since the epoch)`);
  const created = Number(createdText);
  const ageSeconds = nowMs / 1000 - created;
  if (ageSeconds > messageSignatureLimits.maxMessageAgeSeconds) {
    throw new MessageSignatureError('stale', `the message was signed ${Math.floor(ageSeconds)} s ago; at most ${messageSignatureLimits.maxMessageAgeSeconds} s (maxMessageAgeSeconds) are accepted`);
  }
  if (-ageSeconds > messageSignatureLimits.maxFutureSkewSeconds) {
    throw new MessageSignatureError('future', `${messageSignatureHeaders.created} is ${Math.ceil(-ageSeconds)} s in the future; clocks may differ by at most ${messageSignatureLimits.maxFutureSkewSeconds} s`);
  }
  const match = /^v1=([A-Za-z0-9+/]+={0,2})$/.exec(signatureText);
  if (!match) throw new MessageSignatureError('bad_signature', `${messageSignatureHeaders.signature} must be "v1=<base64 HMAC-SHA256>"`);
  const presented = Buffer.from(match[1]!, 'base64');
  const expected = macOf(secret, messageSignatureBase({ keyId, createdSeconds: created, topic: message.topic, key: message.key, value: message.value }));
  if (presented.length !== expected.length || !timingSafeEqual(presented, expected)) {
    throw new MessageSignatureError('bad_signature', 'the signature does not match: signed with another secret, for another topic, or the key or value changed after signing');
  }
}

/**
 * Who a signed message acts as: the key it names (looked up per message, so a revocation takes
 * effect at once), once its signature holds. Throws MessageSignatureError naming why not.
 */
export async function authenticateMessage(pool: LedgerPool, message: ReceivedMessage, nowMs = Date.now()): Promise<Principal> {
  const keyId = message.headers.get(messageSignatureHeaders.keyId);
  if (keyId === undefined) throw new MessageSignatureError('unsigned', `missing ${messageSignatureHeaders.keyId} header (the id, key_…, of an API key with a signing secret)`);
  if (!/^key_[0-9a-f]{1,64}$/.test(keyId)) throw new MessageSignatureError('unknown_key', `${messageSignatureHeaders.keyId} is not an API key id (key_…)`);
  const found = await signingKeyById(pool, keyId);
  if (found === null) throw new MessageSignatureError('unknown_key', `no API key ${keyId}`);
  const { signingSecret, ...principal } = found.principal;
  if (signingSecret === null) {
    throw new MessageSignatureError('key_not_signing', `API key ${keyId} has no signing secret; queue messages are signed with one (create the key with --require-signature)`);
  }
  // The signature first: an unsigned stranger learns nothing about a key's state.
  verifyMessageSignature(message, keyId, signingSecret, nowMs);
  if (found.unusable === 'revoked') throw new MessageSignatureError('revoked_key', `API key ${keyId} is revoked`);
  if (found.unusable === 'expired') throw new MessageSignatureError('expired_key', `API key ${keyId} has expired`);
  return principal;
}
