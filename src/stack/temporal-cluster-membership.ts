import pg from 'pg';
import type { PostgresEndpoint } from './temporal-cluster-config.js';

/**
 * Why a restarted server stalled for 40–55 s, and the cure.
 *
 * Each service of the server writes a row to its database's `cluster_membership` table at start
 * and heartbeats it every 10–15 s. At start, a service reads every row heartbeated within the last
 * 20 s and joins the membership ring (ringpop) through those hosts; only a service that finds no
 * other host forms a ring of its own (go.temporal.io/server v1.29.1,
 * common/membership/ringpop/monitor.go: `healthyHostLastHeartbeatCutoff`, `bootstrapRingPop`).
 * A server restarted within 20 s of its previous incarnation finds that incarnation's rows: their
 * hosts are gone (the ports are picked afresh at each start), and the new services, which are still
 * joining themselves, refuse each other's joins. Every service then waits out the join limit
 * (`global.membership.maxJoinDuration`, 30 s), backs off 10 s and tries again, by which time the
 * stale rows are past the 20 s cutoff: 40–55 s without a ring, in which the frontend answers
 * "Not enough hosts to serve the request".
 *
 * The stack owns its server's databases and runs one server process on them, so once it has
 * made sure no earlier process of its own still runs (the server lock), every row of its host is
 * a dead incarnation's: removing them before the start lets the new services form their ring as a
 * cold start does, in about a second. Rows of other hosts (a deployment that split the services)
 * are left alone; they are pruned by the server itself when they expire.
 */
export async function removeStaleMembership(postgres: PostgresEndpoint, database: string, host: string): Promise<number> {
  const client = new pg.Client({ host: postgres.host, port: postgres.port, user: postgres.user, password: postgres.password, database });
  await client.connect();
  try {
    // The table exists once the schema tool ran, which the start does first.
    const removed = await client.query('delete from cluster_membership where rpc_address = $1', [host]);
    return removed.rowCount ?? 0;
  } finally {
    await client.end();
  }
}
