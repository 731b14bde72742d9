import { ensurePayloadKeyFile } from '../codec/payload-key-file.js';
import { ledgerAppRole, ledgerOwnerRole, provisionLedgerRoles } from '../ledger/roles.js';
import { startEmbeddedPostgres, type DatabaseRoles, type EmbeddedPostgres, type EmbeddedPostgresOptions } from '../stack/embedded-postgres.js';
import { startLocalStack, type LocalStack, type LocalStackOptions, type StackNeeds } from '../stack/stack.js';
import { startTemporalCluster, type TemporalCluster, type TemporalClusterOptions } from '../stack/temporal-cluster.js';
import { startTemporalDevServer, type TemporalDevServer, type TemporalDevServerOptions } from '../stack/temporal-dev-server.js';
import { chargeSearchAttributes } from '../worker/search-attributes-check.js';

/**
 * The ledger's two roles, provisioned on every start of an embedded PostgreSQL: the owner migrates,
 * the app role runs the ledger (src/ledger/roles.ts says what each may do).
 */
export const ledgerDatabaseRoles: DatabaseRoles = {
  owner: ledgerOwnerRole,
  app: ledgerAppRole,
  provision: (superuser, databaseName, passwords) =>
    provisionLedgerRoles(superuser, databaseName, {
      owner: { name: ledgerOwnerRole, password: passwords.owner },
      app: { name: ledgerAppRole, password: passwords.app },
    }),
};

/**
 * What chargeguard needs of the local stack: its search attributes on Temporal, the ledger's roles
 * on PostgreSQL, the payload key file in the data dir. Handed to src/stack/ here, at the composition
 * root, so that the stack stays a leaf that imports none of the program.
 */
export const chargeguardStackNeeds: StackNeeds = {
  searchAttributes: chargeSearchAttributes,
  databaseRoles: ledgerDatabaseRoles,
  ensurePayloadKeyFile,
};

/** The local stack (src/stack/stack.ts) as chargeguard runs on it. */
export function startChargeguardStack(opts: Omit<LocalStackOptions, 'needs'>): Promise<LocalStack> {
  return startLocalStack({ ...opts, needs: chargeguardStackNeeds });
}

/** An embedded PostgreSQL with the ledger's roles (src/stack/embedded-postgres.ts). */
export function startLedgerPostgres(opts: Omit<EmbeddedPostgresOptions, 'roles'>): Promise<EmbeddedPostgres> {
  return startEmbeddedPostgres({ ...opts, roles: ledgerDatabaseRoles });
}

/** A Temporal dev server with the charges' search attributes (src/stack/temporal-dev-server.ts). */
export function startChargeguardDevServer(opts: Omit<TemporalDevServerOptions, 'searchAttributes'>): Promise<TemporalDevServer> {
  return startTemporalDevServer({ ...opts, searchAttributes: chargeSearchAttributes });
}

/** A Temporal server on PostgreSQL with the charges' search attributes (src/stack/temporal-cluster.ts). */
export function startChargeguardCluster(opts: Omit<TemporalClusterOptions, 'searchAttributes'>): Promise<TemporalCluster> {
  return startTemporalCluster({ ...opts, searchAttributes: chargeSearchAttributes });
}
