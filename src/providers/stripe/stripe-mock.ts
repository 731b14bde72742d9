/**
 * Starts stripe-mock (Stripe's stateless mock, installed by scripts/install-stripe-mock.sh) on free
 * loopback ports, for tests that check the connector's requests against Stripe's own schema.
 */
import { spawn } from 'node:child_process';
import { access, constants } from 'node:fs/promises';
import { join } from 'node:path';
import { hasExited, killOnParentExit, terminate } from '../../support/child-process.js';
import { findFreePorts } from '../../support/free-port.js';
import { LogSink } from '../../support/log-sink.js';
import { repoRoot } from '../../support/repo-root.js';
import { isPortAccepting, pollUntil } from '../../support/wait.js';

/** stripe-mock loads Stripe's whole OpenAPI spec at start: a few hundred ms, more on a loaded machine. */
export const stripeMockStartTimeoutMs = 30_000;
export const stripeMockStopGraceMs = 5_000;

export interface StripeMock {
  endpoint: { host: string; port: number; protocol: 'http' };
  stop(): Promise<void>;
}

/** STRIPE_MOCK_PATH, else the binary the installer puts in .tools/bin. */
export function stripeMockPath(): string {
  return process.env['STRIPE_MOCK_PATH'] ?? join(repoRoot(), '.tools', 'bin', 'stripe-mock');
}

export async function startStripeMock(): Promise<StripeMock> {
  const binary = stripeMockPath();
  try {
    await access(binary, constants.X_OK);
  } catch {
    throw new Error(`stripe-mock is not installed at ${binary}: run \`bash scripts/install-stripe-mock.sh\` (or set STRIPE_MOCK_PATH)`);
  }
  const host = '127.0.0.1';
  // Both listeners get an explicit loopback address: given only -http-addr, stripe-mock also opens
  // HTTPS on every interface (its HTTPS default is switched off only by -http, -http-port or -port).
  const [httpPort, httpsPort] = (await findFreePorts(2, host)) as [number, number];
  const sink = new LogSink(undefined);
  const child = spawn(binary, ['-http-addr', `${host}:${httpPort}`, '-https-addr', `${host}:${httpsPort}`], { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout?.on('data', (chunk: Buffer) => sink.write(chunk));
  child.stderr?.on('data', (chunk: Buffer) => sink.write(chunk));
  let spawnError: Error | null = null;
  child.on('error', (err) => {
    spawnError = err;
    sink.note(`spawn error: ${err.message}`);
  });
  const removeExitHook = killOnParentExit(child);
  const stop = async (): Promise<void> => {
    await terminate(child, { signal: 'SIGTERM', graceMs: stripeMockStopGraceMs });
    removeExitHook();
  };
  const ready = await pollUntil(() => isPortAccepting(httpPort, host), {
    deadlineMs: Date.now() + stripeMockStartTimeoutMs,
    shouldAbort: () => spawnError !== null || hasExited(child),
  });
  if (!ready.ok) {
    await stop();
    throw new Error(`stripe-mock did not accept connections on ${host}:${httpPort} within ${stripeMockStartTimeoutMs} ms (a port taken meanwhile is worth a retry). Its output:\n${sink.tail()}`);
  }
  return { endpoint: { host, port: httpPort, protocol: 'http' }, stop };
}
