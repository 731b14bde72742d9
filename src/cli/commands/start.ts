import type { Command } from 'commander';
import { loadConfig } from '../../config.js';
import { startLocalRuntime } from '../../runtime/local-runtime.js';
import { installProcessSafetyNet, keepExitStatus } from '../../runtime/process-safety.js';
import type { LocalStack } from '../../stack/stack.js';
import type { PayloadSettings } from '../../codec/payload-protection.js';
import { codecEndpointUrl, codecPrefix, loopbackUiOrigins, withCodecCorsOrigins } from '../../codec/codec-routes.js';
import { maskUrlPassword, withoutUrlPassword } from '../../support/redact.js';
import { waitForShutdownSignal, waitForStopReason } from '../shutdown.js';
import { clusterApiPorts, maxClusterProcessesPerKind, parseCount, runClusterStart } from './start-cluster.js';

/**
 * How other terminals reach the same servers, without a password or a key on screen or in a
 * captured log: the embedded server's passwords stay in its password file, which PGPASSFILE points
 * the clients at, and the payload keys in their file, which CHARGEGUARD_PAYLOAD_KEYS_FILE points
 * every worker, API and CLI command at, so the lines work as printed; an external DATABASE_URL is
 * shown with its password masked, keys set inline are named, not shown.
 */
export function connectionLines(
  stack: Pick<LocalStack, 'temporalAddress' | 'databaseUrl' | 'migrationDatabaseUrl' | 'passwordFilePath'>,
  payload: PayloadSettings = {},
): string[] {
  const payloadLines = [
    ...(payload.CHARGEGUARD_PAYLOAD_KEYS_FILE !== undefined ? [`  export CHARGEGUARD_PAYLOAD_KEYS_FILE=${payload.CHARGEGUARD_PAYLOAD_KEYS_FILE}`] : []),
    ...(payload.CHARGEGUARD_PAYLOAD_KEYS !== undefined ? ['  export CHARGEGUARD_PAYLOAD_KEYS=<the keys you set>'] : []),
    ...(payload.CHARGEGUARD_PAYLOAD_PLAINTEXT !== undefined ? [`  export CHARGEGUARD_PAYLOAD_PLAINTEXT=${payload.CHARGEGUARD_PAYLOAD_PLAINTEXT}`] : []),
  ];
  if (stack.passwordFilePath === null) {
    return [
      'Other terminals reach the same servers with (passwords masked: use the values you set):',
      `  export TEMPORAL_ADDRESS=${stack.temporalAddress}`,
      `  export DATABASE_URL=${maskUrlPassword(stack.databaseUrl, 'DATABASE_URL')}`,
      ...(stack.migrationDatabaseUrl !== stack.databaseUrl
        ? [`  export MIGRATION_DATABASE_URL=${maskUrlPassword(stack.migrationDatabaseUrl, 'MIGRATION_DATABASE_URL')}`]
        : []),
      ...payloadLines,
    ];
  }
  return [
    'Other terminals reach the same servers with:',
    `  export TEMPORAL_ADDRESS=${stack.temporalAddress}`,
    `  export PGPASSFILE=${stack.passwordFilePath}`,
    `  export DATABASE_URL=${withoutUrlPassword(stack.databaseUrl, 'DATABASE_URL')}`,
    `  export MIGRATION_DATABASE_URL=${withoutUrlPassword(stack.migrationDatabaseUrl, 'MIGRATION_DATABASE_URL')}`,
    ...payloadLines,
  ];
}

function parseUiPort(value: string): number {
  const port = Number(value);
  if (!/^\d+$/.test(value) || port > 65_535) throw new Error(`--ui-port: "${value}" is not a port (0-65535)`);
  return port;
}

/**
 * How the operator gets decoded payloads in the dev server's Web UI (docs/operations.md, The Web
 * UI and the codec endpoint): a codec session in this browser, and the UI's codec settings told to
 * send it, which the dev server's UI cannot be told from its command line.
 */
function webUiCodecLines(codecEndpoint: string | undefined, apiUrl: string): string[] {
  if (codecEndpoint === undefined) {
    return ['                   payloads shown encrypted: set CHARGEGUARD_CODEC_TOKEN (and a --port other than 0) to decode them through the API'];
  }
  return [
    `                   decodes payloads through ${codecEndpoint}: open ${apiUrl}${codecPrefix}/session once and enter CHARGEGUARD_CODEC_TOKEN,`,
    `                   then in the UI's codec server settings enter ${codecEndpoint}, tick "Use my browser setting and ignore cluster-level setting" and "Include cross-origin credentials"`,
  ];
}

export function registerStartCommand(program: Command): void {
  program
    .command('start')
    .description(
      'the main job: start the local stack (Temporal dev server + PostgreSQL, or the servers the environment names), a worker and the HTTP API',
    )
    .option('--ui-port <port>', 'Temporal Web UI port (with --cluster too: the UI server beside the Temporal server)', '8233')
    .option('--host <host>', 'HTTP API host', '127.0.0.1')
    .option('--port <port>', 'HTTP API port (with --cluster: of the first API process, the others on the next ports)', '3000')
    .option('--cluster', 'the production shape: the real Temporal server on PostgreSQL, worker and API processes of their own (docs/operations.md, Running on a cluster)')
    .option('--workers <count>', `with --cluster: worker processes (1-${maxClusterProcessesPerKind})`, '2')
    .option('--apis <count>', `with --cluster: API processes on consecutive ports from --port (1-${maxClusterProcessesPerKind})`, '2')
    .option('--api-ports <ports>', 'with --cluster: one API process per port of this comma-separated list, instead of --port/--apis')
    .action(async (options: { uiPort: string; host: string; port: string; cluster?: boolean; workers: string; apis: string; apiPorts?: string }) => {
      const safety = installProcessSafetyNet({ command: 'start' });
      const config = loadConfig();
      // Listening from here on: a Ctrl-C while the servers start is kept and acted on once they are
      // up (PostgreSQL and the dev server are in process groups of their own and do not see it), not
      // a death of this process that leaves them running.
      // (The cluster shape says "stopping (received …)" when it acts on it, in start-cluster.ts.)
      const early: { signal: NodeJS.Signals | null; running: boolean } = { signal: null, running: options.cluster === true };
      void waitForShutdownSignal().then((signal) => {
        early.signal = signal;
        if (!early.running) process.stderr.write(`received ${signal} while starting: stopping once the servers are up (${signal} again exits at once)\n`);
      });
      if (options.cluster === true) {
        // Checked before anything starts: a typo in a flag should not cost a server start.
        const apiPorts = clusterApiPorts(options);
        const workerCount = parseCount(options.workers, '--workers');
        try {
          await runClusterStart(config, safety, { host: options.host, apiPorts, workerCount, uiPort: parseUiPort(options.uiPort), connectionLines });
        } catch (error) {
          if (process.exitCode === undefined) keepExitStatus(1);
          throw error;
        }
        return;
      }
      const uiPort = parseUiPort(options.uiPort);
      const apiPort = Number(options.port);
      // The dev server's Web UI decodes through this API's /codec: served only with a codec token,
      // and the UI is told its URL before the API listens, so an API on port 0 has none to give.
      const codecEndpoint = config.CHARGEGUARD_CODEC_TOKEN !== undefined && apiPort !== 0 ? codecEndpointUrl(options.host, apiPort) : undefined;
      // The UI's origin is the one on the port picked here, whatever the default list says.
      const runConfig = uiPort === 0 ? config : { ...config, CHARGEGUARD_CODEC_CORS_ORIGINS: withCodecCorsOrigins(config.CHARGEGUARD_CODEC_CORS_ORIGINS, loopbackUiOrigins(uiPort)) };
      // Cleans up after itself if it fails part-way.
      const runtime = await startLocalRuntime(runConfig, { temporalUiPort: uiPort, ...(codecEndpoint === undefined ? {} : { temporalUiCodecEndpoint: codecEndpoint }) });
      let failure: unknown = undefined;
      try {
        if (early.signal !== null) {
          // Asked to stop before it served: no API, no banner whose addresses would be gone at once.
          process.stderr.write(`stopping (received ${early.signal} while starting)…\n`);
        } else {
          // Loaded only here: the other commands need not pay for the HTTP framework's import.
          const { serveHttpApp } = await import('../http-app.js');
          const api = await serveHttpApp(runtime.context, { host: options.host, port: Number(options.port), providers: runtime.provider.connectors });
          runtime.provider.deliverEventsTo(api.url);
          try {
            const lines = [
              'chargeguard is running',
              `  HTTP API:        ${api.url}  (OpenAPI ${api.url}/openapi.json, docs ${api.url}/docs)`,
              `  Temporal Web UI: ${runtime.stack.temporalUiUrl ?? '(external Temporal: use its own UI)'}`,
              ...(runtime.stack.temporalUiUrl === null ? [] : webUiCodecLines(codecEndpoint, api.url)),
              `  worker:          task queue "charges"`,
              `  card payments:   ${runtime.provider.summary}`,
              '',
              ...connectionLines(runtime.stack, runtime.config),
              'Ctrl-C stops everything.',
            ];
            early.running = true;
            process.stdout.write(`${lines.join('\n')}\n`);
            const stop = await waitForStopReason(safety, { 'the worker': runtime.workerRun });
            failure = stop.error;
            process.stderr.write(`stopping (${stop.reason})…\n`);
          } finally {
            await api.close().catch((error: unknown) => process.stderr.write(`cleanup: closing the API failed: ${(error as Error).message}\n`));
          }
        }
      } finally {
        // Whatever ended the command (Ctrl-C, a dead worker, a failed API start): the worker, the
        // embedded Temporal and PostgreSQL are stopped before the process exits.
        await runtime.stop();
      }
      // An uncaught exception already set exit status 70; a worker that died is an ordinary failure.
      if (failure !== undefined && process.exitCode === undefined) {
        keepExitStatus(1);
        throw failure;
      }
    });
}
