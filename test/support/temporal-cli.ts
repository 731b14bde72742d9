import { execFile } from 'node:child_process';
import { defaultPayloadConverter, type Payload } from '@temporalio/common';
import { inject } from 'vitest';
import { encryptPayload } from '../../src/codec/encryption-codec.js';
import type { PayloadKey } from '../../src/codec/key-ring.js';
import { resolveTemporalCliPath } from '../../src/stack/temporal-cli.js';

export interface TemporalCliRun {
  code: number;
  output: string;
}

/** The real `temporal` binary against the test stack, as someone with network access would run it. */
export function temporalCli(...args: string[]): Promise<TemporalCliRun> {
  return new Promise((resolve) => {
    execFile(
      resolveTemporalCliPath(),
      [...args, '--address', inject('stack').temporalAddress],
      { timeout: 60_000 },
      (error, stdout, stderr) => resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, output: `${stdout}\n${stderr}` }),
    );
  });
}

/** `--input` as the CLI takes it: plain JSON (what a forger without the key sends). */
export function plaintextInputArgs(input: unknown): string[] {
  return ['--input', JSON.stringify(input)];
}

/** `--input` of a payload the CLI sends as it is: its metadata, its bytes in base64. */
export function rawPayloadInputArgs(payload: Payload): string[] {
  return [
    ...Object.entries(payload.metadata ?? {}).flatMap(([name, value]) => ['--input-meta', `${name}=${Buffer.from(value!).toString('utf8')}`]),
    '--input-base64',
    '--input',
    Buffer.from(payload.data ?? new Uint8Array()).toString('base64'),
  ];
}

/** `--input` encrypted as the service's codec does it, under `key` (which may be one no worker holds). */
export function encryptedInputArgs(input: unknown, key: PayloadKey): string[] {
  return rawPayloadInputArgs(encryptPayload(defaultPayloadConverter.toPayload(input), key));
}
