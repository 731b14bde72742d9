import { createServer, type Server } from 'node:net';

const host = '127.0.0.1';
/**
 * The server records each service's ports in cluster_membership.rpc_port, a SMALLINT: a port above
 * 32767 makes the membership heartbeat fail and the server exit. The kernel's ephemeral range
 * (where port 0 binds) starts at 32768 on Linux, so the ports are picked by hand below it.
 */
export const smallintPortCeiling = 32_767;
const lowestPickedPort = 20_000;

/**
 * `count` distinct ports in [lowestPickedPort, ceiling] that are free on `host` right now: random
 * candidates are bound one by one and all held until the set is complete, then released. Another
 * process may still take one before the server binds it; the caller retries on "address in use".
 */
export async function findFreePortsBelow(count: number, ceiling: number): Promise<number[]> {
  const held: Server[] = [];
  const ports = new Set<number>();
  const maxCandidates = count * 50;
  try {
    for (let tried = 0; ports.size < count && tried < maxCandidates; tried++) {
      const candidate = lowestPickedPort + Math.floor(Math.random() * (ceiling - lowestPickedPort + 1));
      if (ports.has(candidate)) continue;
      const server = await listenOn(candidate).catch(() => null);
      if (server === null) continue;
      held.push(server);
      ports.add(candidate);
    }
    if (ports.size < count) throw new Error(`found only ${ports.size} of ${count} free ports between ${lowestPickedPort} and ${ceiling}`);
    return [...ports];
  } finally {
    await Promise.all(held.map((server) => new Promise<void>((done) => server.close(() => done()))));
  }
}

function listenOn(port: number): Promise<Server> {
  return new Promise<Server>((resolveListen, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen({ host, port, exclusive: true }, () => resolveListen(server));
  });
}
