import { execFile } from 'node:child_process';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NativeConnection } from '@temporalio/worker';
import type { TestProject } from 'vitest/node';
import { migrateLedger } from '../../src/ledger/migrate.js';
import { createLedgerPool } from '../../src/ledger/pool.js';
import { payloadProtectionFromSettings } from '../../src/codec/payload-protection.js';
import { ensurePayloadKeyFile } from '../../src/codec/payload-key-file.js';
import { bundleChargeWorkflows, createChargeWorker } from '../../src/worker/charge-worker.js';
import { startChargeguardStack } from '../../src/runtime/local-stack.js';

/** tsc over the whole product: about 15 s of CPU, several times that on a loaded machine. */
const cliBuildTimeoutMs = 300_000;

export interface TestStack {
  temporalAddress: string;
  /** The app role (rows and ledger functions, no DDL): what the worker and tests connect as, as the service does. */
  databaseUrl: string;
  /** The schema owner, who ran the migrations. */
  migrationDatabaseUrl: string;
  /**
   * May create databases and use superuser-only settings: scratch ledgers, fault injection. The
   * embedded server's superuser; with an external PostgreSQL, the migration URL.
   */
  adminDatabaseUrl: string;
  /**
   * The run's payload key file (CHARGEGUARD_PAYLOAD_KEYS_FILE): the embedded stack's, generated in
   * the data dir as `start` generates it, or one made for the run with an external Temporal. The
   * shared worker refuses plaintext, so every client a test builds encrypts with it.
   */
  payloadKeysFile: string;
  /** The workflow bundle, built once, for workers that tests start themselves. */
  workflowBundlePath: string;
  dataDir: string;
}

declare module 'vitest' {
  export interface ProvidedContext {
    stack: TestStack;
  }
}

/**
 * Starts the real pair once for the whole run (a Temporal dev server and PostgreSQL, or the
 * servers that TEMPORAL_ADDRESS / DATABASE_URL name) and one worker on the `charges` queue, with
 * payload encryption on as in every deployment.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  // The CLI tests run the CLI as `npm run cli` does, from dist/: built here, once, when the sources
  // changed since it was built, rather than by the first test that calls it (inside its timeout).
  await ensureCliBuilt();
  const dataDir = await mkdtemp(join(tmpdir(), 'chargeguard-test-'));
  // PostgreSQL refuses to run as root; the OS user it runs as must be able to enter this folder.
  await chmod(dataDir, 0o711);
  const stack = await startChargeguardStack({ dataDir, temporalUiPort: null });
  // As a deployment does it: the owner migrates, everything else runs as the app role.
  await migrateLedger(stack.migrationDatabaseUrl);
  const payloadKeysFile = stack.payloadKeysFilePath ?? (await ensurePayloadKeyFile(dataDir)).path;

  const bundle = await bundleChargeWorkflows();
  const workflowBundlePath = join(dataDir, 'workflow-bundle.js');
  await writeFile(workflowBundlePath, bundle.code);

  const connection = await NativeConnection.connect({ address: stack.temporalAddress });
  const pool = createLedgerPool({ databaseUrl: stack.databaseUrl, maxConnections: 20 });
  const worker = await createChargeWorker({
    connection,
    namespace: 'default',
    ledger: pool,
    workflowBundle: { codePath: workflowBundlePath },
    payloadProtection: payloadProtectionFromSettings({ CHARGEGUARD_PAYLOAD_KEYS_FILE: payloadKeysFile }),
  });
  const running = worker.run();

  project.provide('stack', {
    temporalAddress: stack.temporalAddress,
    databaseUrl: stack.databaseUrl,
    migrationDatabaseUrl: stack.migrationDatabaseUrl,
    adminDatabaseUrl: stack.adminDatabaseUrl ?? stack.migrationDatabaseUrl,
    payloadKeysFile,
    workflowBundlePath,
    dataDir,
  });

  return async () => {
    worker.shutdown();
    await running;
    await connection.close();
    await pool.end();
    await stack.stop();
    await rm(dataDir, { recursive: true, force: true });
  };
}

/** Runs the CLI launcher once (its top-level help), which rebuilds dist/ first when it is stale. */
function ensureCliBuilt(): Promise<void> {
  return new Promise((resolvePromise, reject) => {
    execFile(process.execPath, ['bin/chargeguard.mjs', '--help'], { timeout: cliBuildTimeoutMs }, (error, _stdout, stderr) =>
      error ? reject(new Error(`building the CLI (bin/chargeguard.mjs) failed: ${error.message}\n${stderr}`)) : resolvePromise(),
    );
  });
}
