import { hostname } from 'node:os';
import protoModule from '@temporalio/proto';
import type { WorkflowService } from '@temporalio/client';
import { keyCheckValue } from './key-ring.js';
import type { PayloadProtection } from './payload-protection.js';
import type { PlaintextPolicy } from './encryption-codec.js';

const { TaskQueueType, TaskQueueKind } = protoModule.temporal.api.enums.v1;

/**
 * The start-up key check. A process that could decode nothing the deployment's workers write (or
 * whose payloads the workers could not decode) must refuse to start, not answer 500 to every charge
 * after the money moved. Workers advertise their key ids, each with its key check value
 * (key-ring.ts), and their plaintext policy in the identity Temporal shows for their polls; a
 * client (API, MCP, CLI) or another worker compares its own with those of the workers polling the
 * charges queue, one DescribeTaskQueue call, before it serves.
 *
 * Why the workers rather than a value stored in PostgreSQL: they are who decode what a client
 * writes, so this compares against the readers that matter now, not against whichever process
 * stored a value first; and it needs no table in the ledger's schema. The price: with no worker
 * polling (an API started before any worker) there is nothing to compare, and the client starts,
 * saying so in its log.
 */

/** A worker's poll is at most about a minute long; one older than this is a worker that has stopped. */
export const livePollerWindowMs = 90_000;

interface Advertised {
  /** Key ids in ring order (the first encrypts), each with its check value. */
  keys: Array<{ id: string; check: string }>;
  plaintext: PlaintextPolicy;
}

const advertisementPattern = / payload-keys=(none|[A-Za-z0-9._-]+~[0-9a-f]+(?:,[A-Za-z0-9._-]+~[0-9a-f]+)*) plaintext=(refuse|accept)(?:$| )/;

function advertisedOf(protection: Pick<PayloadProtection, 'ring' | 'plaintext'>): Advertised {
  const ring = protection.ring;
  const keys =
    ring === null ? [] : [ring.current, ...[...ring.byId.values()].filter((key) => key !== ring.current)].map((key) => ({ id: key.id, check: keyCheckValue(key) }));
  return { keys, plaintext: protection.plaintext };
}

/** The worker's identity: the SDK's default (pid@host) and what it reads and writes. */
export function workerIdentity(protection: Pick<PayloadProtection, 'ring' | 'plaintext'>): string {
  const { keys, plaintext } = advertisedOf(protection);
  const list = keys.length === 0 ? 'none' : keys.map((key) => `${key.id}~${key.check}`).join(',');
  return `${process.pid}@${hostname()} payload-keys=${list} plaintext=${plaintext}`;
}

/** What an identity advertises; null for a worker that advertises nothing (another program, an older version). */
export function parseWorkerIdentity(identity: string): Advertised | null {
  const match = advertisementPattern.exec(identity);
  if (match === null) return null;
  const keys = match[1] === 'none' ? [] : match[1]!.split(',').map((entry) => {
    const [id, check] = entry.split('~') as [string, string];
    return { id, check };
  });
  return { keys, plaintext: match[2] as PlaintextPolicy };
}

/** Why `reader` cannot decode what `writer` writes, or null when it can. */
function cannotRead(reader: Advertised, writer: Advertised, readersKeys: string): string | null {
  const written = writer.keys[0];
  if (written === undefined) return reader.plaintext === 'accept' ? null : 'payloads in clear, which are refused';
  const held = reader.keys.find((key) => key.id === written.id);
  if (held === undefined) return `payloads under key ${written.id}, which is not among ${readersKeys} (${reader.keys.map((k) => k.id).join(', ') || 'none'})`;
  if (held.check !== written.check) return `payloads under key ${written.id}, but the two processes hold different keys under that id`;
  return null;
}

export class PayloadKeyMismatchError extends Error {
  override readonly name = 'PayloadKeyMismatchError';
}

export interface KeyCheckOptions {
  namespace: string;
  taskQueue: string;
  protection: Pick<PayloadProtection, 'ring' | 'plaintext'>;
  log: (line: string) => void;
  /** Now, for the freshness of the pollers seen (tests). */
  nowMs?: number;
}

/**
 * Compares this process's payload keys with those every live worker of the queue advertises;
 * throws PayloadKeyMismatchError naming the settings when either side could not decode the other.
 * Returns how many workers were compared. A failed DescribeTaskQueue (a permission the deployment
 * withholds, say) is logged and the check skipped: it is a guard at start, not a dependency.
 */
export async function assertPayloadKeysMatchWorkers(service: WorkflowService, options: KeyCheckOptions): Promise<number> {
  let pollers;
  try {
    ({ pollers } = await service.describeTaskQueue({
      namespace: options.namespace,
      taskQueue: { name: options.taskQueue, kind: TaskQueueKind.TASK_QUEUE_KIND_NORMAL },
      taskQueueType: TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    }));
  } catch (error) {
    options.log(`payload key check skipped: describing task queue "${options.taskQueue}" failed (${(error as Error).message})`);
    return 0;
  }
  const now = options.nowMs ?? Date.now();
  const self = advertisedOf(options.protection);
  let compared = 0;
  for (const poller of pollers ?? []) {
    const seenMs = timestampMs(poller.lastAccessTime);
    if (seenMs !== null && now - seenMs > livePollerWindowMs) continue;
    const identity = poller.identity ?? '';
    const worker = parseWorkerIdentity(identity);
    if (worker === null) continue;
    compared++;
    const workerCannot = cannotRead(worker, self, 'its keys');
    const selfCannot = cannotRead(self, worker, "this process's keys");
    const problems = [
      ...(workerCannot === null ? [] : [`the worker could not read this process's ${workerCannot}`]),
      ...(selfCannot === null ? [] : [`this process could not read the worker's ${selfCannot}`]),
    ];
    if (problems.length > 0) {
      throw new PayloadKeyMismatchError(
        `payload keys do not match the worker ${identity.split(' ')[0]} polling task queue "${options.taskQueue}": ${problems.join('; ')}. ` +
          'Set CHARGEGUARD_PAYLOAD_KEYS (or CHARGEGUARD_PAYLOAD_KEYS_FILE, as `chargeguard start` prints it) to the keys the workers use, ' +
          'and CHARGEGUARD_PAYLOAD_PLAINTEXT as they do (docs/back-door.md)',
      );
    }
  }
  options.log(
    compared === 0
      ? `payload key check: no worker polls task queue "${options.taskQueue}" yet, nothing to compare`
      : `payload key check: keys match the ${compared} worker(s) polling task queue "${options.taskQueue}"`,
  );
  return compared;
}

function timestampMs(ts: { seconds?: { toNumber(): number } | number | null; nanos?: number | null } | null | undefined): number | null {
  if (!ts || ts.seconds === undefined || ts.seconds === null) return null;
  const seconds = typeof ts.seconds === 'number' ? ts.seconds : ts.seconds.toNumber();
  return seconds * 1000 + Math.floor((ts.nanos ?? 0) / 1e6);
}
