import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { Connection } from '@temporalio/client';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { createApiKey } from '../../src/auth/api-keys.js';
import { createAccount, deposit } from '../../src/ledger/accounts.js';
import { createLedgerPool } from '../../src/ledger/pool.js';
import { wireChargeSchema } from '../../src/service/wire.js';
import { send } from './api.js';
import { chargeBody, newKey, waitFor } from './harness.js';

/**
 * The Temporal Web UI in a real browser: Debian's chromium (installed by scripts/install-chromium.sh, which `npm test` runs first),
 * driven by playwright-core, which never downloads a browser of its own.
 */
export const chromiumPath = '/usr/bin/chromium';

/** A page of the UI renders its history from a handful of API calls; a busy 2-core machine is slow. */
const uiRenderTimeoutMs = 60_000;

/** A headless chromium with a profile of its own (no cookies, no local storage of an earlier run). */
export async function openBrowser(): Promise<{ context: BrowserContext; close(): Promise<void> }> {
  const userDataDir = await mkdtemp(join(tmpdir(), 'chargeguard-chromium-'));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: chromiumPath,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  return {
    context,
    close: async () => {
      await context.close();
      await rm(userDataDir, { recursive: true, force: true });
    },
  };
}

/** A `chargeguard start` child with its stdout and stderr together; killed at the end if still running. */
export function runCli(args: string[], env: NodeJS.ProcessEnv): { child: ChildProcess; exited: Promise<number | null>; output(): string; until(pattern: RegExp, what: string, timeoutMs?: number): Promise<boolean> } {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let text = '';
  child.stdout!.on('data', (chunk: Buffer) => (text += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (text += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const until = (pattern: RegExp, what: string, timeoutMs = 300_000) =>
    waitFor(
      async () => {
        if (child.exitCode !== null) throw new Error(`${what}: the process exited (${child.exitCode}):\n${text}`);
        return pattern.test(text);
      },
      { timeoutMs, intervalMs: 200, what },
    );
  return { child, exited, output: () => text, until };
}

/** The environment of a `start` with embedded servers of its own, not the test run's. */
export function ownStackEnv(dataDir: string, extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, CHARGEGUARD_DATA_DIR: dataDir, ...extra };
  for (const name of ['TEMPORAL_ADDRESS', 'DATABASE_URL', 'MIGRATION_DATABASE_URL', 'CHARGEGUARD_PAYLOAD_KEYS', 'CHARGEGUARD_PAYLOAD_KEYS_FILE', 'CHARGEGUARD_PAYLOAD_PLAINTEXT']) {
    delete env[name];
  }
  return env;
}

export interface StartedCharge {
  workflowId: string;
  runId: string;
  /** A metadata value only the encrypted input holds: no search attribute, no id carries it. */
  marker: string;
  orderId: string;
}

/**
 * One charge through the API a `start` printed, on a tenant set up with the embedded server's
 * superuser (fixed at initdb: src/stack/embedded-postgres.ts), and its workflow's run id.
 */
export async function chargeThroughStart(startOutput: string, apiUrl: string): Promise<StartedCharge> {
  const databasePort = /export DATABASE_URL=postgres:\/\/[^@]+@127\.0\.0\.1:(\d+)\//.exec(startOutput)?.[1];
  const temporalAddress = /export TEMPORAL_ADDRESS=(\S+)/.exec(startOutput)?.[1];
  if (databasePort === undefined || temporalAddress === undefined) throw new Error(`start printed no DATABASE_URL or TEMPORAL_ADDRESS:\n${startOutput}`);
  const pool = createLedgerPool({ databaseUrl: `postgres://postgres:postgres@127.0.0.1:${databasePort}/chargeguard`, maxConnections: 2 });
  const tenant = `web-ui-${Date.now().toString(36)}`;
  let apiKey: string;
  try {
    for (const id of ['payer', 'payee']) await createAccount(pool, { tenant, id, currency: 'USD', allowOverdraft: false });
    await deposit(pool, tenant, 'payer', 1_000_000, 'web-ui-codec-test');
    apiKey = (await createApiKey(pool, tenant, 'web ui codec test', 'agent')).key;
  } finally {
    await pool.end();
  }
  const key = newKey('web-ui');
  const marker = `decoded-by-codec-${key.slice(-8)}`;
  const body = chargeBody({ amount: 4_321, metadata: { note: marker } });
  const response = await send(apiUrl, '/v1/charges', { method: 'POST', apiKey, body, headers: { 'idempotency-key': key, prefer: 'wait=10' } });
  if (response.status !== 201 || wireChargeSchema.parse(response.body).status !== 'succeeded') {
    throw new Error(`the charge did not succeed: ${response.status} ${response.text}`);
  }
  const workflowId = `charge/${tenant}/${key}`;
  // The raw service call: no data converter, so nothing here needs the payload keys.
  const connection = await Connection.connect({ address: temporalAddress });
  try {
    const described = await connection.workflowService.describeWorkflowExecution({ namespace: 'default', execution: { workflowId } });
    const runId = described.workflowExecutionInfo?.execution?.runId;
    if (!runId) throw new Error(`no run id for ${workflowId}`);
    return { workflowId, runId, marker, orderId: body.order_id as string };
  } finally {
    await connection.close();
  }
}

/** What the operator does once per browser: the codec session form, with the codec token. */
export async function startCodecSession(page: Page, sessionUrl: string, token: string): Promise<void> {
  await page.goto(sessionUrl);
  await page.locator('input[name="token"]').fill(token);
  await page.getByRole('button', { name: 'Start session' }).click();
  await page.getByText('Codec session started').waitFor({ timeout: uiRenderTimeoutMs });
}

/**
 * The one step the operator takes, as `start` prints it (docs/operations.md, The Web UI and the
 * codec endpoint): "open <url> once in the same browser and enter CHARGEGUARD_CODEC_TOKEN". Read
 * from the output, so the printed line and the test cannot drift apart.
 */
export function printedSessionUrl(startOutput: string): string {
  const url = /open (\S+\/codec\/session) once in the same browser and enter CHARGEGUARD_CODEC_TOKEN/.exec(startOutput)?.[1];
  if (url === undefined) throw new Error(`start printed no codec session step:\n${startOutput}`);
  return url;
}

/** What the UI's settings API tells the browser about the codec endpoint. */
export async function uiCodecSettings(uiUrl: string): Promise<{ Endpoint: string; IncludeCredentials: boolean; PassAccessToken: boolean }> {
  const settings = (await (await fetch(`${uiUrl}/api/v1/settings`)).json()) as { Codec: { Endpoint: string; IncludeCredentials: boolean; PassAccessToken: boolean } };
  return settings.Codec;
}

/**
 * Opens the charge's workflow history page and waits until `text` is on it; records the status of
 * every decode call the UI made and saves a full-page screenshot either way.
 */
export async function openWorkflowPage(
  page: Page,
  options: { uiUrl: string; charge: StartedCharge; text: string; screenshotPath: string },
): Promise<{ found: boolean; decodeStatuses: number[] }> {
  const decodeStatuses: number[] = [];
  page.on('response', (response) => {
    if (response.request().method() === 'POST' && response.url().endsWith('/codec/decode')) decodeStatuses.push(response.status());
  });
  const { uiUrl, charge } = options;
  await page.goto(`${uiUrl}/namespaces/default/workflows/${encodeURIComponent(charge.workflowId)}/${charge.runId}/history`);
  const found = await page
    .getByText(options.text)
    .first()
    .waitFor({ timeout: uiRenderTimeoutMs })
    .then(
      () => true,
      () => false,
    );
  await mkdir(dirname(options.screenshotPath), { recursive: true });
  await page.screenshot({ path: options.screenshotPath, fullPage: true });
  return { found, decodeStatuses };
}
