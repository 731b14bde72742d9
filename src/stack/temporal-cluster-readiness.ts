import { readFile } from 'node:fs/promises';
import type { ChildProcess } from 'node:child_process';
import { Client, Connection, type TLSConfig } from '@temporalio/client';
import { msToTs } from '@temporalio/common/lib/time.js';
import { hasExited } from '../support/child-process.js';
import type { TemporalClusterTls } from './temporal-cluster-config.js';
import { indexedValueTypeByKind, type SearchAttributeKind } from '../support/search-attribute-kinds.js';
import { isPortAccepting, pollUntil } from '../support/wait.js';

/**
 * When a started Temporal server counts as serving, and the namespace it must serve: what the
 * cluster stack waits for before it hands the address to workers and APIs.
 */

// gRPC status codes (grpc-js is not a direct dependency; the numbers are the gRPC spec's).
const grpcNotFound = 5;
const grpcAlreadyExists = 6;
const host = '127.0.0.1';
const systemNamespace = 'temporal-system';
/** A workflow id nobody starts: asking history for it proves history serves. */
const readinessProbeWorkflowId = 'chargeguard-readiness-probe';
/** A task queue nobody polls: asking matching to describe it proves matching serves. */
const readinessProbeTaskQueue = 'chargeguard-readiness-probe';

export async function waitUntilServing(p: {
  child: ChildProcess;
  address: string;
  port: number;
  deadlineMs: number;
  serverGone: AbortSignal;
  spawnError: () => Error | null;
  tls: TLSConfig | undefined;
}): Promise<void> {
  const died = (): boolean => p.serverGone.aborted || hasExited(p.child);
  const diedError = (): Error =>
    p.spawnError() ?? new Error(`server process exited early (code ${p.child.exitCode ?? 'null'}, signal ${p.child.signalCode ?? 'null'})`);
  const portOpen = await pollUntil(() => isPortAccepting(p.port, host), { deadlineMs: p.deadlineMs, intervalMs: 200, signal: p.serverGone });
  if (died()) throw diedError();
  if (!portOpen.ok) throw new Error(`gRPC port ${p.port} did not accept connections before the deadline`);
  // The frontend listens, and answers from persistence (the system namespace), before history and
  // matching have joined the membership ring; until they have, every workflow call is answered
  // "Not enough hosts to serve the request". So history and matching answer too: a describe of a
  // workflow that does not exist is routed to the history host owning its shard, whose NotFound
  // means it serves; a describe of a task queue is answered by matching.
  const serving = await pollUntil(
    () =>
      withConnection(p.address, p.deadlineMs, async (connection) => {
        await connection.withDeadline(p.deadlineMs, () => connection.workflowService.getSystemInfo({}));
        await connection.withDeadline(p.deadlineMs, () => connection.workflowService.describeNamespace({ namespace: systemNamespace }));
        await connection
          .withDeadline(p.deadlineMs, () =>
            connection.workflowService.describeWorkflowExecution({ namespace: systemNamespace, execution: { workflowId: readinessProbeWorkflowId } }),
          )
          .catch((err: unknown) => {
            if ((err as { code?: number }).code !== grpcNotFound) throw err;
          });
        await connection.withDeadline(p.deadlineMs, () =>
          connection.workflowService.describeTaskQueue({ namespace: systemNamespace, taskQueue: { name: readinessProbeTaskQueue } }),
        );
        return true;
      }, p.tls),
    { deadlineMs: p.deadlineMs, intervalMs: 250, signal: p.serverGone },
  );
  if (died()) throw diedError();
  if (!serving.ok) throw new Error(`frontend did not answer before the deadline: ${describe(serving.lastError)}`);
}

/**
 * Unlike the dev server, the real server creates no `default` namespace: register it, then the
 * charge search attributes. On SQL visibility a custom attribute is a per-namespace alias of a
 * pre-made column, so it becomes usable once the frontend's namespace cache refreshes: the wait
 * ends when the frontend lists every attribute, so a worker's start check passes right away.
 */
export async function ensureNamespace(p: {
  address: string;
  namespace: string;
  retentionHours: number;
  searchAttributes: Readonly<Record<string, SearchAttributeKind>>;
  deadlineMs: number;
  serverGone: AbortSignal;
  tls: TLSConfig | undefined;
}): Promise<void> {
  await withConnection(p.address, p.deadlineMs, async (connection) => {
    const exists = await connection
      .withDeadline(p.deadlineMs, () => connection.workflowService.describeNamespace({ namespace: p.namespace }))
      .then(
        () => true,
        (err: unknown) => {
          if ((err as { code?: number }).code === grpcNotFound) return false;
          throw err;
        },
      );
    if (!exists) {
      await connection
        .withDeadline(p.deadlineMs, () =>
          connection.workflowService.registerNamespace({
            namespace: p.namespace,
            description: 'chargeguard charges',
            workflowExecutionRetentionPeriod: msToTs(p.retentionHours * 3_600_000),
          }),
        )
        .catch((err: unknown) => {
          // Two starts racing on the same databases: the other one registered it.
          if ((err as { code?: number }).code !== grpcAlreadyExists) throw err;
        });
    }
  }, p.tls);

  const wanted = Object.entries(p.searchAttributes);
  if (wanted.length === 0) return;
  let wrongType: WrongSearchAttributeType | null = null;
  const listed = await pollUntil(
    () =>
      withConnection(p.address, p.deadlineMs, async (connection) => {
        const existing = await connection.withDeadline(p.deadlineMs, () => connection.operatorService.listSearchAttributes({ namespace: p.namespace }));
        const custom = existing.customAttributes ?? {};
        const missing: Record<string, number> = {};
        for (const [name, kind] of wanted) {
          const actual = custom[name];
          if (actual === undefined || actual === null) missing[name] = indexedValueTypeByKind[kind];
          else if (Number(actual) !== indexedValueTypeByKind[kind]) {
            wrongType = new WrongSearchAttributeType(`search attribute ${name} exists on namespace ${p.namespace} with type ${String(actual)}, but ${kind} is required`);
            throw wrongType;
          }
        }
        if (Object.keys(missing).length === 0) return true;
        await connection.withDeadline(p.deadlineMs, () =>
          connection.operatorService.addSearchAttributes({ namespace: p.namespace, searchAttributes: missing }),
        );
        return false;
      }, p.tls),
    { deadlineMs: p.deadlineMs, intervalMs: 250, signal: p.serverGone, shouldAbort: () => wrongType !== null },
  );
  if (wrongType !== null) throw wrongType;
  if (!listed.ok) throw new Error(`namespace ${p.namespace} did not list the charge search attributes before the deadline: ${describe(listed.lastError)}`);

  // Listed is not yet usable: the operator service reads the mapping from persistence, while a
  // start is validated against the frontend's namespace cache, refreshed on its own timer (a test
  // once saw "Namespace default has no mapping defined for search attribute ChargeTenant" right
  // after the list succeeded). A real start carrying every attribute is the only proof.
  const usable = await pollUntil(
    () => withConnection(p.address, p.deadlineMs, (connection) => startsWithAttributes(connection, p.namespace, wanted), p.tls),
    { deadlineMs: p.deadlineMs, intervalMs: 250, signal: p.serverGone },
  );
  if (!usable.ok) throw new Error(`namespace ${p.namespace} did not accept a start with the charge search attributes before the deadline: ${describe(usable.lastError)}`);
}

/** A value of each kind, for the probe start. */
const probeValueByKind: Readonly<Record<SearchAttributeKind, unknown>> = {
  Text: 'probe',
  Keyword: 'probe',
  Int: 0,
  Double: 0,
  Bool: false,
  Datetime: new Date(0),
  KeywordList: 'probe',
};

/** Starts (and at once terminates) a workflow nobody runs, carrying every attribute: false while the frontend refuses them. */
async function startsWithAttributes(connection: Connection, namespace: string, wanted: [string, SearchAttributeKind][]): Promise<boolean> {
  const client = new Client({ connection, namespace });
  const searchAttributes = Object.fromEntries(wanted.map(([name, kind]) => [name, [probeValueByKind[kind]]]));
  try {
    const handle = await client.workflow.start('ChargeguardSearchAttributeProbe', {
      taskQueue: readinessProbeTaskQueue,
      workflowId: `${readinessProbeWorkflowId}/search-attributes/${Date.now()}`,
      // The untyped form: the probe knows only names and kinds, not the SDK's typed keys.
      searchAttributes: searchAttributes as never,
      workflowExecutionTimeout: '1 minute',
    });
    await handle.terminate('search attribute probe');
    return true;
  } catch (err) {
    if (String((err as { cause?: { details?: unknown } }).cause?.details ?? (err as Error).message).includes('no mapping defined')) return false;
    throw err;
  }
}

class WrongSearchAttributeType extends Error {}

/**
 * How the stack itself reaches an mTLS frontend (readiness, namespace, search attributes): with the
 * server's own certificate, which allows client authentication (see TemporalClusterTls).
 */
export async function clientTlsFor(tls: TemporalClusterTls | undefined): Promise<TLSConfig | undefined> {
  if (tls === undefined) return undefined;
  const [crt, key, ca] = await Promise.all([readFile(tls.certPath), readFile(tls.keyPath), readFile(tls.caPath)]);
  return { serverNameOverride: tls.serverName, serverRootCACertificate: ca, clientCertPair: { crt, key } };
}

async function withConnection<T>(
  address: string,
  deadlineMs: number,
  fn: (connection: Connection) => Promise<T>,
  tls: TLSConfig | undefined,
): Promise<T> {
  const connectTimeoutMs = Math.max(1, Math.min(5_000, deadlineMs - Date.now()));
  // Not Connection.connect(): a failed connect leaves its channel open (see temporal-dev-server.ts).
  const connection = Connection.lazy({ address, connectTimeout: connectTimeoutMs, ...(tls ? { tls } : {}) });
  try {
    await connection.ensureConnected();
    return await fn(connection);
  } finally {
    await connection.close();
  }
}

function describe(err: unknown): string {
  if (err === undefined) return 'no response';
  return err instanceof Error ? err.message : String(err);
}
