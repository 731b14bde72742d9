import { spawn } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { hasExited, killOnParentExit, terminate } from '../support/child-process.js';
import { LogSink } from '../support/log-sink.js';
import { repoRoot } from '../support/repo-root.js';
import { pollUntil } from '../support/wait.js';

/**
 * The Temporal Web UI that `start` and `start --cluster` run: the real server has no UI of its own,
 * and the dev server's embedded one cannot be told `includeCredentials` on its command line (only
 * `--ui-codec-endpoint`), so both shapes run Temporal's UI server (the same UI, 2.42.1), built from
 * github.com/temporalio/ui-server (which ships the UI's built assets) by
 * scripts/install-temporal-ui-server.sh. It listens on loopback only, talks to the cluster's
 * frontend, and decodes payloads through chargeguard's codec endpoint (src/codec/codec-routes.ts)
 * with the browser's codec session cookie.
 */

export interface TemporalUiServerOptions {
  /** Where its configuration file is written (the stack's data dir/temporal-ui). */
  workDir: string;
  /** The Temporal frontend's host:port. */
  temporalAddress: string;
  /** Loopback port the UI listens on. */
  port: number;
  /** The API's codec endpoint (http://127.0.0.1:<port>/codec); null: payloads are shown as stored. */
  codecEndpoint: string | null;
  logFilePath?: string;
  /** Defaults to {@link resolveTemporalUiServerPath}. */
  binPath?: string;
  startTimeoutMs?: number;
  /** How long SIGTERM may take before SIGKILL. */
  stopTimeoutMs?: number;
}

export interface TemporalUiServer {
  url: string;
  pid: number;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stop(): Promise<void>;
}

const host = '127.0.0.1';
/** Reading its assets and config takes well under a second; the rest is a busy machine. */
const defaultStartTimeoutMs = 30_000;
const defaultStopTimeoutMs = 10_000;
/** The name of the UI server's config "environment": it reads <workDir>/config/<env>.yaml. */
const configEnvironment = 'chargeguard';

/** The binary scripts/install-temporal-ui-server.sh installs, or TEMPORAL_UI_SERVER_PATH. */
export function resolveTemporalUiServerPath(): string {
  const fromEnv = process.env.TEMPORAL_UI_SERVER_PATH?.trim();
  const path = resolve(fromEnv !== undefined && fromEnv !== '' ? fromEnv : join(repoRoot(), '.tools', 'temporal-ui-server', 'bin', 'temporal-ui-server'));
  try {
    accessSync(path, constants.X_OK);
  } catch {
    throw new Error(
      `Temporal UI server not installed: ${path} is missing. Run \`npm run setup\` (scripts/install-temporal-ui-server.sh builds it into .tools/temporal-ui-server), or set TEMPORAL_UI_SERVER_PATH.`,
    );
  }
  return path;
}

/**
 * Whether the UI server is installed (TEMPORAL_UI_SERVER_INSTALL_SKIP=1 installs none): the dev
 * shape then falls back to the dev server's own UI, which cannot be told to send credentials.
 */
export function temporalUiServerInstalled(): boolean {
  try {
    resolveTemporalUiServerPath();
    return true;
  } catch {
    return false;
  }
}

/**
 * The UI server's configuration (its server/config/config.go fields). JSON, which its YAML reader
 * reads as it is.
 */
export function temporalUiServerConfig(opts: Pick<TemporalUiServerOptions, 'temporalAddress' | 'port' | 'codecEndpoint'>): Record<string, unknown> {
  return {
    temporalGrpcAddress: opts.temporalAddress,
    host,
    port: opts.port,
    publicPath: '',
    enableUi: true,
    defaultNamespace: 'default',
    // Its CSRF cookie without Secure: the UI is served over plain http, on loopback only.
    cors: { cookieInsecure: true },
    // Nothing to ask the internet from a local stack.
    notifyOnNewVersion: false,
    auth: { enabled: false },
    codec:
      opts.codecEndpoint === null
        ? {}
        : {
            endpoint: opts.codecEndpoint,
            // The UI has no access token to pass (no single sign-on here); the codec session
            // cookie is its credential, sent because of includeCredentials.
            passAccessToken: false,
            includeCredentials: true,
          },
  };
}

/** Starts the UI server and resolves once it answers its settings API with the codec endpoint it was given. */
export async function startTemporalUiServer(opts: TemporalUiServerOptions): Promise<TemporalUiServer> {
  const binPath = opts.binPath ?? resolveTemporalUiServerPath();
  const workDir = resolve(opts.workDir);
  const deadlineMs = Date.now() + (opts.startTimeoutMs ?? defaultStartTimeoutMs);
  const stopTimeoutMs = opts.stopTimeoutMs ?? defaultStopTimeoutMs;
  await mkdir(join(workDir, 'config'), { recursive: true });
  await writeFile(join(workDir, 'config', `${configEnvironment}.yaml`), `${JSON.stringify(temporalUiServerConfig(opts), null, 2)}\n`);

  const url = `http://${host}:${opts.port}`;
  const args = ['--root', workDir, '--config', 'config', '--env', configEnvironment, 'start'];
  const sink = new LogSink(opts.logFilePath);
  sink.note(`starting ${binPath} ${args.join(' ')}`);
  const child = spawn(binPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  const gone = new AbortController();
  let spawnError: Error | null = null;
  child.on('error', (err) => {
    spawnError = err;
    sink.note(`spawn error: ${err.message}`);
    gone.abort();
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolveExit) => {
    child.on('exit', (code, signal) => {
      sink.note(`UI server exited (code ${code ?? 'null'}, signal ${signal ?? 'null'})`);
      gone.abort();
      resolveExit({ code, signal });
    });
  });
  child.stdout?.on('data', (chunk: Buffer) => sink.write(chunk));
  child.stderr?.on('data', (chunk: Buffer) => sink.write(chunk));
  const removeExitHook = killOnParentExit(child);

  // Serving, and serving this configuration: the settings the browser reads name the codec endpoint.
  const ready = await pollUntil(
    async () => {
      const response = await fetch(`${url}/api/v1/settings`, { signal: AbortSignal.timeout(2_000) });
      if (!response.ok) return false;
      const settings = (await response.json()) as { Codec?: { Endpoint?: string } };
      return (settings.Codec?.Endpoint ?? '') === (opts.codecEndpoint ?? '');
    },
    { deadlineMs, intervalMs: 100, signal: gone.signal },
  );
  if (!ready.ok) {
    if (!hasExited(child)) await terminate(child, { signal: 'SIGTERM', graceMs: stopTimeoutMs }).catch(() => undefined);
    removeExitHook();
    const tail = sink.tail();
    await sink.close();
    const why = spawnError ?? (hasExited(child) ? `it exited (code ${child.exitCode ?? 'null'}, signal ${child.signalCode ?? 'null'})` : `no answer from ${url}/api/v1/settings before the deadline`);
    throw new Error(
      `Temporal UI server (${binPath}) failed to start on ${url}: ${String(why)}` +
        (opts.logFilePath ? ` (log ${opts.logFilePath})` : '') +
        (tail ? `\n--- last UI server output ---\n${tail}` : ''),
    );
  }

  let stopping: Promise<void> | null = null;
  return {
    url,
    pid: child.pid!,
    exited,
    stop: () => {
      stopping ??= (async () => {
        try {
          const { forced } = await terminate(child, { signal: 'SIGTERM', graceMs: stopTimeoutMs });
          if (forced) sink.note(`UI server ignored SIGTERM for ${stopTimeoutMs} ms and was killed`);
        } finally {
          removeExitHook();
          await sink.close();
        }
      })();
      return stopping;
    },
  };
}
