import { join, resolve } from 'node:path';
import type { Command } from 'commander';
import { loadConfig } from '../../config.js';
import { startLocalRuntime } from '../../runtime/local-runtime.js';
import { installProcessSafetyNet, keepExitStatus } from '../../runtime/process-safety.js';
import type { LocalStack } from '../../stack/stack.js';
import type { PayloadSettings } from '../../codec/payload-protection.js';
import { codecEndpointUrl, codecPrefix, loopbackUiOrigins, withCodecCorsOrigins } from '../../codec/codec-routes.js';
import { findFreePort } from '../../support/free-port.js';
import { startTemporalUiServer, temporalUiServerInstalled, type TemporalUiServer } from '../../stack/temporal-ui-server.js';
import { step } from '../../support/progress.js';
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
 * How the operator gets decoded payloads in the Web UI (docs/operations.md, The Web UI and the
 * codec endpoint). With the UI server `start` runs, one step: a codec session in this browser (its
 * configuration sends the session cookie). With the dev server's own UI (the UI server not
 * installed), the UI's codec settings must also be told to send it.
 */
export function webUiCodecLines(codecEndpoint: string | undefined, apiUrl: string, ui: 'ui-server' | 'dev-server'): string[] {
  if (codecEndpoint === undefined) {
    return [
      ui === 'ui-server'
        ? '                   payloads shown encrypted: set CHARGEGUARD_CODEC_TOKEN to decode them through the API'
        : '                   payloads shown encrypted: set CHARGEGUARD_CODEC_TOKEN (and a --port other than 0) to decode them through the API',
    ];
  }
  const session = `                   decodes payloads through ${codecEndpoint}: open ${apiUrl}${codecPrefix}/session once in the same browser and enter CHARGEGUARD_CODEC_TOKEN`;
  if (ui === 'ui-server') return [session];
  return [
    `${session},`,
    `                   then in the UI's codec server settings enter ${codecEndpoint}, tick "Use my browser setting and ignore cluster-level setting" and "Include cross-origin credentials"`,
    '                   (the Temporal UI server is not installed: `npm run setup` installs it, and then this step is not needed)',
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
      const apiPort = Number(options.port);
      // The Web UI: Temporal's UI server, configured to send the codec session cookie
      // (includeCredentials), beside a headless dev server, when it is installed and Temporal is
      // the embedded one; otherwise the dev server's own UI, which can be given only the endpoint.
      const ownUiServer = config.TEMPORAL_ADDRESS === undefined && temporalUiServerInstalled();
      // Picked before the API starts: its codec endpoint must allow the UI's origin.
      const requestedUiPort = parseUiPort(options.uiPort);
      const uiPort = ownUiServer && requestedUiPort === 0 ? await findFreePort() : requestedUiPort;
      // The dev server's UI is told the endpoint before the API listens, so an API on port 0 has
      // none to give it; the UI server starts after the API and is told the port it got.
      const devServerCodecEndpoint =
        !ownUiServer && config.CHARGEGUARD_CODEC_TOKEN !== undefined && apiPort !== 0 ? codecEndpointUrl(options.host, apiPort) : undefined;
      // The UI's origin is the one on the port picked here, whatever the default list says.
      const runConfig = uiPort === 0 ? config : { ...config, CHARGEGUARD_CODEC_CORS_ORIGINS: withCodecCorsOrigins(config.CHARGEGUARD_CODEC_CORS_ORIGINS, loopbackUiOrigins(uiPort)) };
      // Cleans up after itself if it fails part-way.
      const runtime = await startLocalRuntime(runConfig, {
        temporalUiPort: ownUiServer ? null : uiPort,
        ...(devServerCodecEndpoint === undefined ? {} : { temporalUiCodecEndpoint: devServerCodecEndpoint }),
      });
      let failure: unknown = undefined;
      let uiServer: TemporalUiServer | null = null;
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
            const codecEndpoint = ownUiServer
              ? config.CHARGEGUARD_CODEC_TOKEN === undefined
                ? undefined
                : codecEndpointUrl(options.host, Number(new URL(api.url).port))
              : devServerCodecEndpoint;
            if (ownUiServer) {
              const dataDir = resolve(config.CHARGEGUARD_DATA_DIR);
              uiServer = await step('starting the Temporal Web UI', () =>
                startTemporalUiServer({
                  workDir: join(dataDir, 'temporal-ui'),
                  temporalAddress: runtime.stack.temporalAddress,
                  port: uiPort,
                  codecEndpoint: codecEndpoint ?? null,
                  logFilePath: join(dataDir, 'logs', 'temporal-ui.log'),
                }),
              );
            }
            const uiUrl = uiServer?.url ?? runtime.stack.temporalUiUrl;
            const lines = [
              'chargeguard is running',
              `  HTTP API:        ${api.url}  (OpenAPI ${api.url}/openapi.json, docs ${api.url}/docs)`,
              `  Temporal Web UI: ${uiUrl ?? '(external Temporal: use its own UI)'}`,
              ...(uiUrl === null ? [] : webUiCodecLines(codecEndpoint, api.url, ownUiServer ? 'ui-server' : 'dev-server')),
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
            // The UI first: nothing left to decode for once the API is gone.
            if (uiServer !== null) await uiServer.stop().catch((error: unknown) => process.stderr.write(`cleanup: stopping the Temporal Web UI failed: ${(error as Error).message}\n`));
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
