import { createServer } from 'node:net';
import { describe, expect, it } from 'vitest';
import { ephemeralPortRange, findFreePorts, findFreePortsBelow, pickedPortFloor } from '../src/support/free-port.js';

const bindable = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen({ host: '127.0.0.1', port, exclusive: true }, () => server.close(() => resolve(true)));
  });

describe('free ports for servers started later', () => {
  it('are distinct, free, and below the ephemeral range that outgoing connections take their ports from', async () => {
    const [ephemeralLow] = ephemeralPortRange();
    const ports = await findFreePorts(16);
    expect(new Set(ports).size).toBe(16);
    for (const port of ports) {
      expect(port).toBeGreaterThanOrEqual(pickedPortFloor);
      expect(port).toBeLessThan(ephemeralLow);
      expect(await bindable(port)).toBe(true);
    }
  });

  it('below a ceiling (a server that stores its port as a SMALLINT) never above it', async () => {
    const ports = await findFreePortsBelow(8, 32_767);
    expect(new Set(ports).size).toBe(8);
    for (const port of ports) {
      expect(port).toBeGreaterThanOrEqual(pickedPortFloor);
      expect(port).toBeLessThanOrEqual(32_767);
    }
    await expect(findFreePortsBelow(1, pickedPortFloor + 10)).rejects.toThrow(/no free port found between/);
  });
});
