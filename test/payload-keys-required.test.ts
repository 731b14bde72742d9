/**
 * Payload encryption is always on (docs/back-door.md, section 2): a start the service did not
 * encrypt reaches the worker as the undecodable-payload value, not as an input; a process without
 * the deployment's keys refuses to start, naming the settings; the embedded stack's key is made
 * once and kept, for its owner only.
 */
import { randomBytes } from 'node:crypto';
import { spawn } from 'node:child_process';
import { chmod, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Payload } from '@temporalio/common';
import { describe, expect, inject, it } from 'vitest';
import { workerDataConverter } from '../src/codec/data-converter.js';
import { parsePayloadKeyRing } from '../src/codec/key-ring.js';
import { isUndecodablePayload } from '../src/domain/undecodable-payload.js';
import { ensurePayloadKeyFile } from '../src/codec/payload-key-file.js';
import { findFreePort } from '../src/support/free-port.js';
import { chargeWorkflowId } from '../src/domain/charge.js';
import { chargeBody, fundedTenant, newKey, testPayloadProtection, testPolicy, useHarness, waitFor } from './support/harness.js';
import { encryptedInputArgs, plaintextInputArgs, temporalCli } from './support/temporal-cli.js';

const h = useHarness();

/** No worker polls this queue: the start's input stays in history as the CLI wrote it, and no workflow code runs. */
const unpolledQueue = `nobody-polls-${newKey('q')}`;

/** What the worker's codec makes of an execution's stored input: the undecodable-payload reason, or null. */
async function workerReadingOfInput(workflowId: string): Promise<string | null> {
  const history = await h.temporal.workflow.getHandle(workflowId).fetchHistory();
  const input = history.events![0]!.workflowExecutionStartedEventAttributes!.input!.payloads![0]! as Payload;
  const [decoded] = await workerDataConverter(testPayloadProtection()).payloadCodecs![0]!.decode([input]);
  const value: unknown = JSON.parse(new TextDecoder().decode(decoded!.data!));
  return isUndecodablePayload(value) ? value.undecodablePayload : null;
}

async function startByHand(workflowId: string, inputArgs: string[]): Promise<void> {
  const run = await temporalCli('workflow', 'start', '--type', 'ChargeWorkflow', '--workflow-id', workflowId, '--task-queue', unpolledQueue, ...inputArgs);
  expect(run.code, run.output).toBe(0);
}

async function terminate(workflowId: string): Promise<void> {
  await h.temporal.workflow.getHandle(workflowId).terminate('test cleanup');
}

describe('a start the service did not encrypt reaches the worker as the undecodable-payload value', () => {
  it('plaintext JSON from `temporal workflow start`: "plaintext refused"', async () => {
    const tenant = await fundedTenant(h, { label: 'plain-start' });
    const key = newKey('plain');
    const workflowId = chargeWorkflowId(tenant, key);
    const intent = h.client.buildIntent(tenant, key, chargeBody({ amount: 2_000 }));
    await startByHand(workflowId, plaintextInputArgs({ intent, policy: testPolicy }));
    try {
      expect(await workerReadingOfInput(workflowId)).toMatch(/^plaintext refused/);
    } finally {
      await terminate(workflowId);
    }
  });

  it('encrypted under a key id no worker holds: the reason names the key id, not the key', async () => {
    const tenant = await fundedTenant(h, { label: 'foreign-key' });
    const key = newKey('foreign');
    const workflowId = chargeWorkflowId(tenant, key);
    const foreignSetting = `k-forger:${randomBytes(32).toString('base64')}`;
    const intent = h.client.buildIntent(tenant, key, chargeBody({ amount: 2_000 }));
    await startByHand(workflowId, encryptedInputArgs({ intent, policy: testPolicy }, parsePayloadKeyRing(foreignSetting)!.current));
    try {
      const reason = await workerReadingOfInput(workflowId);
      expect(reason).toMatch(/encrypted with key k-forger, which is not among the configured keys/);
      expect(reason).not.toContain(foreignSetting.slice('k-forger:'.length));
    } finally {
      await terminate(workflowId);
    }
  });

  it("the run's own key, as the service encrypts: decoded as the input it is", async () => {
    const tenant = await fundedTenant(h, { label: 'own-key' });
    const key = newKey('own');
    const workflowId = chargeWorkflowId(tenant, key);
    const intent = h.client.buildIntent(tenant, key, chargeBody({ amount: 2_000 }));
    await startByHand(workflowId, encryptedInputArgs({ intent, policy: testPolicy }, testPayloadProtection().ring!.current));
    try {
      expect(await workerReadingOfInput(workflowId)).toBeNull();
    } finally {
      await terminate(workflowId);
    }
  });
});

/** `chargeguard api` against the shared stack with these payload settings; its exit code and output once it ends or listens. */
async function runApi(payloadEnv: Record<string, string>): Promise<{ code: number | null; output: string }> {
  const stack = inject('stack');
  const env: NodeJS.ProcessEnv = { ...process.env, TEMPORAL_ADDRESS: stack.temporalAddress, DATABASE_URL: stack.databaseUrl, ...payloadEnv };
  for (const name of ['CHARGEGUARD_PAYLOAD_KEYS', 'CHARGEGUARD_PAYLOAD_KEYS_FILE', 'CHARGEGUARD_PAYLOAD_PLAINTEXT']) if (!(name in payloadEnv)) delete env[name];
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'api', '--port', String(await findFreePort()), '--log-level', 'warn'], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  try {
    await waitFor(async () => child.exitCode !== null || /API listening on/.test(output), { timeoutMs: 120_000, intervalMs: 100, what: 'the API to listen or exit' });
  } finally {
    if (child.exitCode === null) child.kill('SIGTERM');
  }
  return { code: await exited, output };
}

describe('an API without the deployment\'s keys refuses to start', () => {
  it('no keys at all: exits naming CHARGEGUARD_PAYLOAD_KEYS and CHARGEGUARD_PAYLOAD_PLAINTEXT', async () => {
    const { code, output } = await runApi({});
    expect(code).not.toBe(0);
    expect(output).toMatch(/set CHARGEGUARD_PAYLOAD_KEYS .*or set CHARGEGUARD_PAYLOAD_PLAINTEXT=accept/);
    expect(output).not.toMatch(/API listening/);
  });

  it("other keys than the workers': exits naming the key ids and the setting, never the keys", async () => {
    const material = randomBytes(32).toString('base64');
    const { code, output } = await runApi({ CHARGEGUARD_PAYLOAD_KEYS: `k-stray:${material}` });
    expect(code).not.toBe(0);
    expect(output).toMatch(/payload keys do not match the worker .* polling task queue "charges"/);
    expect(output).toMatch(/the worker could not read this process's payloads under key k-stray, which is not among its keys/);
    expect(output).toMatch(/CHARGEGUARD_PAYLOAD_KEYS/);
    expect(output).not.toContain(material);
    const runKey = (await readFile(inject('stack').payloadKeysFile, 'utf8')).split('\n').find((line) => /^[^#].*:/.test(line))!.split(':')[1]!;
    expect(output).not.toContain(runKey);
  });

  it('the same key id over another key: refused, the check values differ', async () => {
    const runKeyId = testPayloadProtection().ring!.current.id;
    const { code, output } = await runApi({ CHARGEGUARD_PAYLOAD_KEYS: `${runKeyId}:${randomBytes(32).toString('base64')}` });
    expect(code).not.toBe(0);
    expect(output).toMatch(new RegExp(`payloads under key ${runKeyId}, but the two processes hold different keys under that id`));
  });

  it('plaintext accepted and no keys, while the workers refuse plaintext: refused', async () => {
    const { code, output } = await runApi({ CHARGEGUARD_PAYLOAD_PLAINTEXT: 'accept' });
    expect(code).not.toBe(0);
    expect(output).toMatch(/the worker could not read this process's payloads in clear, which are refused/);
  });
});

describe("the embedded stack's key file", () => {
  it('is generated once, kept across starts, readable by its owner only', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'chargeguard-keyfile-'));
    try {
      const first = await ensurePayloadKeyFile(dataDir);
      expect(first.created).toBe(true);
      const content = await readFile(first.path, 'utf8');
      expect((await stat(first.path)).mode & 0o777).toBe(0o600);
      const again = await ensurePayloadKeyFile(dataDir);
      expect(again).toEqual({ path: first.path, created: false });
      expect(await readFile(first.path, 'utf8')).toBe(content);
      // A copy with looser permissions is tightened, its key kept.
      await chmod(first.path, 0o644);
      await ensurePayloadKeyFile(dataDir);
      expect((await stat(first.path)).mode & 0o777).toBe(0o600);
      expect(await readFile(first.path, 'utf8')).toBe(content);
      // A file that is not a key file stops the start, naming it.
      await writeFile(first.path, 'not a key\n');
      await expect(ensurePayloadKeyFile(dataDir)).rejects.toThrow(/the embedded stack's key file \(.*payload-keys\) entry 1 is not <key id>:<base64 key>/);
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });

  it("the test run's stack made one, mode 0600, and the shared worker reads with it", async () => {
    const path = inject('stack').payloadKeysFile;
    expect((await stat(path)).mode & 0o777).toBe(0o600);
    expect(testPayloadProtection().ring!.current.id).toMatch(/^local-[0-9a-f]{8}$/);
  });
});
