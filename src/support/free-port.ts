import { createServer, type Server } from 'node:net';

/**
 * Asks the kernel for `count` distinct TCP ports that are free on `host` right now.
 *
 * All listeners are held open together so the kernel cannot hand out the same port twice, then
 * released. Another process may grab a port before our server binds it, so callers treat
 * "address in use" at startup as retryable.
 */
export async function findFreePorts(count: number, host = '127.0.0.1'): Promise<number[]> {
  const servers: Server[] = [];
  try {
    for (let i = 0; i < count; i++) servers.push(await listenOnAnyPort(host));
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

function listenOnAnyPort(host: string): Promise<Server> {
  return new Promise<Server>((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen({ host, port: 0, exclusive: true }, () => resolve(server));
  });
}
