import { randomBytes } from 'node:crypto';
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { payloadKeyBytes } from './key-ring.js';
import { readPayloadKeyFile } from './payload-protection.js';

/**
 * The embedded deployment's payload key: generated on its first start and kept in the data dir
 * beside the Temporal database whose payloads it encrypts, readable by its owner only, as the
 * PostgreSQL passwords are (src/stack/postgres-credentials.ts). Every process of the deployment reads this
 * one file: `start` itself, its `--cluster` children and other terminals through
 * CHARGEGUARD_PAYLOAD_KEYS_FILE, which `start` prints. Losing the file makes every open charge
 * unreadable, so it lives and is backed up with the data it belongs to.
 */
export const payloadKeyFileName = 'payload-keys';

/** Random per data dir, so two deployments' keys are told apart by id in errors and the key check. */
const keyIdRandomBytes = 4;

export interface PayloadKeyFile {
  path: string;
  /** True when this call generated the key (the deployment's first start). */
  created: boolean;
}

/** The data dir's key file, generated when absent; always left with mode 0600. */
export async function ensurePayloadKeyFile(dataDir: string): Promise<PayloadKeyFile> {
  const path = join(dataDir, payloadKeyFileName);
  await mkdir(dataDir, { recursive: true });
  const id = `local-${randomBytes(keyIdRandomBytes).toString('hex')}`;
  const line = `${id}:${randomBytes(payloadKeyBytes).toString('base64')}`;
  let created = true;
  try {
    // Exclusive: two starts racing on a new data dir must not each keep a different key.
    await writeFile(path, `# chargeguard payload keys (docs/back-door.md): the first encrypts, all decrypt\n${line}\n`, { mode: 0o600, flag: 'wx' });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    created = false;
  }
  // A file copied in with looser permissions is tightened; one that is not a key file stops the start here.
  await chmod(path, 0o600);
  readPayloadKeyFile(path, `the embedded stack's key file`);
  return { path, created };
}
