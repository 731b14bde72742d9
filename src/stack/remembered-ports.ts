import { mkdir, rename, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { readFileIfPresent } from '../support/files.js';

/**
 * The ports the embedded servers of one data dir listened on, kept in the data dir
 * (`ports.json`), so a restart listens on them again and the exports `start` printed
 * (TEMPORAL_ADDRESS, DATABASE_URL, ...) stay valid in the terminals that ran them. The first start
 * of a data dir takes free ports (two data dirs, or parallel test runs, never share one); each later
 * start takes the remembered port when it is free, and a new free one, said in the log, when
 * another program holds it.
 */
export const rememberedPortsFileName = 'ports.json';

const host = '127.0.0.1';

/** Which server a remembered port belongs to: the key in ports.json. */
export type RememberedPortName = 'temporal' | 'temporal-cluster-frontend' | 'postgres' | 'temporal-postgres';

/** Writes of one file in this process, one after the other (the servers start in parallel). */
const writeQueues = new Map<string, Promise<void>>();

export async function readRememberedPorts(dataDir: string): Promise<Partial<Record<RememberedPortName, number>>> {
  const text = await readFileIfPresent(join(dataDir, rememberedPortsFileName));
  if (text === null) return {};
  try {
    const parsed = JSON.parse(text) as unknown;
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) return {};
    // Only ports: a hand-edited or truncated file costs the remembered ports, never the start.
    return Object.fromEntries(Object.entries(parsed).filter(([, port]) => Number.isInteger(port) && (port as number) > 0 && (port as number) <= 65_535));
  } catch {
    return {};
  }
}

/** Records `port` as `name`'s, keeping the others' (written beside and renamed: never half a file). */
export function rememberPort(dataDir: string, name: RememberedPortName, port: number): Promise<void> {
  const path = join(dataDir, rememberedPortsFileName);
  const previous = writeQueues.get(path) ?? Promise.resolve();
  const next = previous.then(async () => {
    const ports = await readRememberedPorts(dataDir);
    if (ports[name] === port) return;
    await mkdir(dataDir, { recursive: true });
    const staging = `${path}.${process.pid}.partial`;
    await writeFile(staging, `${JSON.stringify({ ...ports, [name]: port }, null, 2)}\n`);
    await rename(staging, path);
  });
  // A failed write must not block the next one; the caller sees its own failure.
  writeQueues.set(path, next.catch(() => undefined));
  return next;
}

/** Whether nothing listens on `port` of the loopback address right now (bound and released at once). */
export function isPortFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen({ host, port, exclusive: true }, () => server.close(() => resolve(true)));
  });
}

/**
 * Starts a server on `name`'s remembered port when it is free, else on one `start` picks (the
 * argument is then undefined), and remembers the port it listens on. A remembered port taken
 * between the check and the bind costs one more start on a picked port.
 */
export async function startOnRememberedPort<T>(p: {
  dataDir: string;
  name: RememberedPortName;
  start: (port: number | undefined) => Promise<T>;
  portOf: (server: T) => number;
  log: (line: string) => void;
  /** Ports a server cannot take (the cluster's Temporal server stores them as SMALLINT). */
  usable?: (port: number) => boolean;
  /** Run first: stops the server a dead owner left on the remembered port, which is then free to take. */
  reclaimOrphan?: () => Promise<void>;
}): Promise<T> {
  await p.reclaimOrphan?.();
  const remembered = (await readRememberedPorts(p.dataDir))[p.name];
  let port: number | undefined;
  if (remembered !== undefined && (p.usable?.(remembered) ?? true)) {
    if (await isPortFree(remembered)) port = remembered;
    else p.log(`${p.name}: port ${remembered}, used by the last start of this data dir, is taken by another program; taking another (exports printed before for it no longer hold)`);
  }
  let server: T;
  try {
    server = await p.start(port);
  } catch (error) {
    if (port === undefined || (await isPortFree(port))) throw error;
    p.log(`${p.name}: port ${port} was taken before the server could bind it; taking another`);
    server = await p.start(undefined);
  }
  await rememberPort(p.dataDir, p.name, p.portOf(server));
  return server;
}
