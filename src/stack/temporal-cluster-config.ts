/**
 * The static configuration of the Temporal server the cluster stack runs (go.temporal.io/server
 * v1.29.1, `temporal-server start`), derived from upstream's config/development-postgres12.yaml.
 *
 * Written as JSON into the server's `development.yaml`: YAML 1.2 is a superset of JSON, so the
 * server's YAML loader reads it as is, and the runtime needs no YAML library.
 *
 * One process runs all four services (frontend, history, matching, worker). The machine this runs
 * on has 2 cores and the services are the same binary: four processes would each pay the Go
 * runtime, the persistence pools and the membership ring for no extra capacity. To split them,
 * start one process per service with the same config and `--service frontend` (or history,
 * matching, worker), each on its own host or with its own ports, and point clients at the
 * frontends only; the membership ring (ringpop over the `membershipPort`s, with the hosts recorded
 * in the cluster_membership table) finds the others.
 */

export type TemporalServiceName = 'frontend' | 'history' | 'matching' | 'worker';
export const temporalServiceNames: readonly TemporalServiceName[] = ['frontend', 'history', 'matching', 'worker'];

export interface TemporalServicePorts {
  grpcPort: number;
  membershipPort: number;
}

export interface PostgresEndpoint {
  host: string;
  port: number;
  user: string;
  password: string;
}

export interface TemporalClusterConfigInput {
  /** Where every service binds; one host for the whole single-process cluster. */
  host: string;
  ports: Readonly<Record<TemporalServiceName, TemporalServicePorts>>;
  postgres: PostgresEndpoint;
  /** Database holding workflow state (executions, history, task queues, namespaces). */
  databaseName: string;
  /** Database holding the visibility index (list / count queries, search attributes). */
  visibilityDatabaseName: string;
  /**
   * Fixed for the life of the databases: the server keeps the value recorded at their first use
   * and ignores (with a warning) another one here. Small because one history host owns every shard.
   */
  numHistoryShards: number;
  /** Absolute path of the dynamic config file the server polls. */
  dynamicConfigFilePath: string;
  /** debug, info, warn or error. */
  logLevel: string;
  /** Connections each persistence pool may open (the visibility pool gets a quarter). */
  maxPersistenceConnections: number;
  /** host:port of a Prometheus listener; none when absent. */
  metricsListenAddress?: string;
  /** mTLS on the frontend; plaintext when absent. */
  tls?: TemporalClusterTls;
}

/**
 * mTLS on the frontend, which is what clients reach: it presents `certPath` for `serverName` and
 * accepts only clients whose certificate `caPath` signed. The server's own clients of its frontend
 * (the internal system worker) present the same certificate, so it must allow client
 * authentication too (extendedKeyUsage serverAuth, clientAuth). Traffic between the services of the
 * one process stays on loopback, in plaintext.
 */
export interface TemporalClusterTls {
  certPath: string;
  keyPath: string;
  caPath: string;
  serverName: string;
}

function frontendTls(tls: TemporalClusterTls): Record<string, unknown> {
  const client = { serverName: tls.serverName, rootCaFiles: [tls.caPath] };
  return {
    frontend: {
      server: { certFile: tls.certPath, keyFile: tls.keyPath, requireClientAuth: true, clientCaFiles: [tls.caPath] },
      client,
    },
    systemWorker: { certFile: tls.certPath, keyFile: tls.keyPath, client },
  };
}

/** Shards for a fresh cluster: 4 as upstream's development config, ample for one history host. */
export const defaultNumHistoryShards = 4;

const clusterName = 'active';

/** The server's static config, as the object serialised into development.yaml. */
export function temporalClusterConfig(input: TemporalClusterConfigInput): Record<string, unknown> {
  const datastore = (databaseName: string, maxConns: number) => ({
    sql: {
      pluginName: 'postgres12',
      databaseName,
      connectAddr: `${input.postgres.host}:${input.postgres.port}`,
      connectProtocol: 'tcp',
      user: input.postgres.user,
      password: input.postgres.password,
      maxConns,
      maxIdleConns: maxConns,
      maxConnLifetime: '1h',
    },
  });
  const services = Object.fromEntries(
    temporalServiceNames.map((name) => [
      name,
      { rpc: { grpcPort: input.ports[name].grpcPort, membershipPort: input.ports[name].membershipPort, bindOnLocalHost: false, bindOnIP: input.host } },
    ]),
  );
  const visibilityConns = Math.max(2, Math.floor(input.maxPersistenceConnections / 4));
  return {
    log: { stdout: true, level: input.logLevel },
    persistence: {
      defaultStore: 'postgres-default',
      visibilityStore: 'postgres-visibility',
      numHistoryShards: input.numHistoryShards,
      datastores: {
        'postgres-default': datastore(input.databaseName, input.maxPersistenceConnections),
        'postgres-visibility': datastore(input.visibilityDatabaseName, visibilityConns),
      },
    },
    global: {
      membership: { maxJoinDuration: '30s', broadcastAddress: input.host },
      // No pprof port, and a metrics listener only when asked (the bench counts requests there):
      // each is one more port to keep free. Upstream's development config shows both.
      ...(input.metricsListenAddress === undefined
        ? {}
        : { metrics: { prometheus: { timerType: 'histogram', listenAddress: input.metricsListenAddress } } }),
      ...(input.tls === undefined ? {} : { tls: frontendTls(input.tls) }),
    },
    services,
    clusterMetadata: {
      enableGlobalNamespace: false,
      failoverVersionIncrement: 10,
      masterClusterName: clusterName,
      currentClusterName: clusterName,
      clusterInformation: {
        [clusterName]: {
          enabled: true,
          initialFailoverVersion: 1,
          rpcName: 'frontend',
          rpcAddress: `${input.host}:${input.ports.frontend.grpcPort}`,
        },
      },
    },
    dcRedirectionPolicy: { policy: 'noop' },
    // Archival off: the ledger is the record that must last; workflow histories are kept for the
    // namespace's retention only.
    archival: { history: { state: 'disabled' }, visibility: { state: 'disabled' } },
    namespaceDefaults: { archival: { history: { state: 'disabled' }, visibility: { state: 'disabled' } } },
    dynamicConfigClient: { filepath: input.dynamicConfigFilePath, pollInterval: '10s' },
  };
}

/**
 * Dynamic config: empty, so every setting is the server's production default (unlike the dev
 * server, which forces search-attribute cache refreshes on every read). The file exists so an
 * operator can tune a running cluster: the server re-reads it every poll interval. Its format is
 * the server's: key -> list of { value, constraints }.
 */
export function temporalClusterDynamicConfig(): Record<string, unknown> {
  return {};
}

/** What the file holds: JSON, which the server's YAML loader accepts (see the module comment). */
export function renderConfigFile(value: Record<string, unknown>): string {
  return `${JSON.stringify(value, null, 2)}\n`;
}
