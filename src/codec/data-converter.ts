import type { DataConverter } from '@temporalio/common';
import { EncryptionCodec, type UndecodablePolicy } from './encryption-codec.js';
import type { PayloadProtection } from './payload-protection.js';

/**
 * The data converters of the service's Temporal clients and workers: payloads encrypted with the
 * key ring (payload-protection.ts), decoded by two variants of one codec. A worker's hands the
 * workflow the undecodable-payload value for what it cannot read, so the execution fails visibly
 * instead of retrying its first task for ever; a client's (API, MCP, CLI) throws, naming why.
 */
export function payloadDataConverter(protection: Pick<PayloadProtection, 'ring' | 'plaintext'>, onUndecodable: UndecodablePolicy): DataConverter {
  // Nothing to encrypt and nothing refused: Temporal's default converter, as before keys existed.
  if (protection.ring === null && protection.plaintext === 'accept') return {};
  return { payloadCodecs: [new EncryptionCodec(protection.ring, { onUndecodable, plaintext: protection.plaintext })] };
}

/** For the clients that start and read charges (API, MCP, CLI, `start`). */
export function clientDataConverter(protection: Pick<PayloadProtection, 'ring' | 'plaintext'>): DataConverter {
  return payloadDataConverter(protection, 'throw');
}

/** For workers: what cannot be decoded reaches the workflow as the undecodable-payload value. */
export function workerDataConverter(protection: Pick<PayloadProtection, 'ring' | 'plaintext'>): DataConverter {
  return payloadDataConverter(protection, 'sentinel');
}
