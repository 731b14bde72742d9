import { execFile } from 'node:child_process';
import { inject } from 'vitest';

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
  /** stdout parsed as JSON, when it is JSON. */
  json: any;
}

/** The CLI as `npm run cli` runs it: compiled JavaScript (dist/, built by the global setup when stale). */
export const cliLauncher = 'bin/chargeguard.mjs';

/**
 * Runs the real CLI in a child process against the shared test stack, as a user or a script would,
 * with the run's payload keys as `start` prints them for other terminals.
 * `env` adds to the environment; a variable given as undefined is left out.
 */
export function runCli(args: string[], env: Record<string, string | undefined> = {}): Promise<CliResult> {
  const stack = inject('stack');
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [cliLauncher, ...args],
      {
        env: {
          ...process.env,
          TEMPORAL_ADDRESS: stack.temporalAddress,
          DATABASE_URL: stack.databaseUrl,
          CHARGEGUARD_PAYLOAD_KEYS_FILE: stack.payloadKeysFile,
          ...env,
        },
        timeout: 60_000,
      },
      (error, stdout, stderr) => {
        let json: unknown;
        try {
          json = JSON.parse(stdout);
        } catch {
          json = undefined;
        }
        const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
        resolve({ code, stdout, stderr, json });
      },
    );
  });
}
