import { randomInt } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';

/**
 * Asks for `count` distinct TCP ports that are free on `host` right now.
 *
 * All listeners are held open together so that no port is handed out twice, then released.
 * Another process may still take a port before our server binds it, so callers treat "address in
 * use" at startup as retryable. To make that rare, the ports are picked below the kernel's
 * ephemeral range (the local ports of outgoing connections, and what it answers for port 0): a
 * port picked there and left unbound while a stack starts (seconds) could be given to any
 * outgoing connection on the machine meanwhile; below it, only to another server that asks for
 * that very port.
 */
export async function findFreePorts(count: number, host = '127.0.0.1'): Promise<number[]> {
  return heldThenReleased(count, () => listenOnFreePort(host, null));
}

/**
 * As findFreePorts, every port at most `ceiling` (a server that stores its port as a SMALLINT:
 * 32767); throws when none is found there instead of asking the kernel, whose pick may be above.
 */
export async function findFreePortsBelow(count: number, ceiling: number, host = '127.0.0.1'): Promise<number[]> {
  return heldThenReleased(count, () => listenOnFreePort(host, ceiling));
}

async function heldThenReleased(count: number, listen: () => Promise<Server>): Promise<number[]> {
  const servers: Server[] = [];
  try {
    for (let i = 0; i < count; i++) servers.push(await listen());
    return servers.map((server) => {
      const address = server.address();
      if (address === null || typeof address === 'string') throw new Error(`Unexpected listen address ${String(address)}`);
      return address.port;
    });
  } finally {
    await Promise.all(servers.map((server) => new Promise<void>((resolve) => server.close(() => resolve()))));
  }
}

export async function findFreePort(host = '127.0.0.1'): Promise<number> {
  const [port] = await findFreePorts(1, host);
  return port!;
}

/** The lowest port picked: above the registered services most machines run. */
export const pickedPortFloor = 10_000;
/** Random ports tried below the ephemeral range before the kernel is asked for one in it. */
const pickAttemptsMax = 64;
/** Linux's default ephemeral range, when /proc does not say. */
const defaultEphemeralRange: readonly [number, number] = [32_768, 60_999];

/** The kernel's ephemeral port range (Linux: /proc/sys/net/ipv4/ip_local_port_range), or the default. */
export function ephemeralPortRange(): readonly [number, number] {
  try {
    const [low, high] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);
    if (Number.isInteger(low) && Number.isInteger(high) && low! > 0 && high! >= low!) return [low!, high!];
  } catch {
    // Not Linux, or no /proc: the default.
  }
  return defaultEphemeralRange;
}

/** A listener on a free port below the ephemeral range (and at most `ceiling`, strictly, when given). */
async function listenOnFreePort(host: string, ceiling: number | null): Promise<Server> {
  const top = Math.min(ceiling ?? Number.POSITIVE_INFINITY, ephemeralPortRange()[0] - 1);
  // Too little room below the range (a machine configured so): the kernel's own pick, unless bounded.
  const room = top - pickedPortFloor >= 1_000;
  for (let attempt = 0; room && attempt < pickAttemptsMax; attempt++) {
    try {
      return await listenOn(host, randomInt(pickedPortFloor, top + 1));
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code !== 'EADDRINUSE' && code !== 'EACCES') throw error;
    }
  }
  if (ceiling !== null) throw new Error(`no free port found between ${pickedPortFloor} and ${top} on ${host}`);
  return listenOn(host, 0);
}

function listenOn(host: string, port: number): Promise<Server> {
  return new Promise<Server>((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen({ host, port, exclusive: true }, () => resolve(server));
  });
}
