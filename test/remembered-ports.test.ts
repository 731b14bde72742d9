import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { findFreePort } from '../src/support/free-port.js';
import { isPortFree, readRememberedPorts, rememberPort, startOnRememberedPort } from '../src/stack/remembered-ports.js';

/** A real listener standing in for a server: binds the port it is given, or a free one. */
async function listen(port = 0): Promise<Server> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: '127.0.0.1', port, exclusive: true }, resolve);
  });
  return server;
}

function portOf(server: Server): number {
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('not listening on a port');
  return address.port;
}

describe('ports remembered in the data dir (ports.json)', () => {
  let dataDir: string;
  const servers: Server[] = [];
  const lines: string[] = [];
  const start = async (port: number | undefined): Promise<Server> => {
    const server = await listen(port);
    servers.push(server);
    return server;
  };
  const closeAll = () => Promise.all(servers.splice(0).map((server) => new Promise((resolve) => server.close(resolve))));

  beforeEach(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'chargeguard-ports-'));
    lines.length = 0;
  });
  afterEach(async () => {
    await closeAll();
    await rm(dataDir, { recursive: true, force: true });
  });

  it('the first start takes a free port and remembers it; the next start, with the port free again, takes the same', async () => {
    const first = await startOnRememberedPort({ dataDir, name: 'postgres', start, portOf, log: (line) => lines.push(line) });
    const port = portOf(first);
    expect(await readRememberedPorts(dataDir)).toEqual({ postgres: port });
    await closeAll();
    expect(await isPortFree(port)).toBe(true);

    const again = await startOnRememberedPort({ dataDir, name: 'postgres', start, portOf, log: (line) => lines.push(line) });
    expect(portOf(again)).toBe(port);
    expect(lines).toEqual([]);
  });

  it('a remembered port another program holds: another port, said in the log, and remembered instead', async () => {
    const holder = await listen();
    servers.push(holder);
    const taken = portOf(holder);
    await rememberPort(dataDir, 'temporal', taken);
    const started = await startOnRememberedPort({ dataDir, name: 'temporal', start, portOf, log: (line) => lines.push(line) });
    expect(portOf(started)).not.toBe(taken);
    expect(lines.join('\n')).toMatch(new RegExp(`temporal: port ${taken}, used by the last start of this data dir, is taken by another program`));
    expect((await readRememberedPorts(dataDir)).temporal).toBe(portOf(started));
  });

  it('a server a dead owner left on the remembered port is stopped first, so the port is taken again', async () => {
    const orphan = await listen();
    const port = portOf(orphan);
    await rememberPort(dataDir, 'temporal', port);
    const reclaimOrphan = () => new Promise<void>((resolve) => orphan.close(() => resolve()));
    const started = await startOnRememberedPort({ dataDir, name: 'temporal', start, portOf, log: (line) => lines.push(line), reclaimOrphan });
    expect(portOf(started)).toBe(port);
    expect(lines).toEqual([]);
  });

  it('a remembered port taken between the check and the bind: one more start on a picked port', async () => {
    const port = await findFreePort();
    await rememberPort(dataDir, 'postgres', port);
    let holder: Server | null = null;
    const calls: Array<number | undefined> = [];
    const racing = async (wanted: number | undefined): Promise<Server> => {
      calls.push(wanted);
      // Someone binds it first, as another process can between isPortFree and the server's bind.
      if (wanted !== undefined && holder === null) {
        holder = await listen(wanted);
        servers.push(holder);
      }
      return start(wanted);
    };
    const started = await startOnRememberedPort({ dataDir, name: 'postgres', start: racing, portOf, log: (line) => lines.push(line) });
    expect(calls).toEqual([port, undefined]);
    expect(portOf(started)).not.toBe(port);
    expect(lines.join('\n')).toMatch(/was taken before the server could bind it/);
  });

  it('a start that fails for another reason is not retried, and remembers nothing', async () => {
    const failing = () => Promise.reject(new Error('initdb failed'));
    await expect(startOnRememberedPort({ dataDir, name: 'postgres', start: failing, portOf, log: (line) => lines.push(line) })).rejects.toThrow('initdb failed');
    expect(await readRememberedPorts(dataDir)).toEqual({});
  });

  it('keeps every server\'s port when they start in parallel, and shrugs off a file that is not its own', async () => {
    await Promise.all([rememberPort(dataDir, 'temporal', 40_001), rememberPort(dataDir, 'postgres', 40_002), rememberPort(dataDir, 'temporal-postgres', 40_003)]);
    expect(JSON.parse(await readFile(join(dataDir, 'ports.json'), 'utf8'))).toEqual({ temporal: 40_001, postgres: 40_002, 'temporal-postgres': 40_003 });
    await writeFile(join(dataDir, 'ports.json'), '{"temporal": "seven", "postgres": 70000, "temporal-postgres": 40003');
    expect(await readRememberedPorts(dataDir)).toEqual({});
    await writeFile(join(dataDir, 'ports.json'), '{"temporal": "seven", "postgres": 70000, "temporal-postgres": 40003}');
    expect(await readRememberedPorts(dataDir)).toEqual({ 'temporal-postgres': 40_003 });
  });
});
