import { createServer } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addressKind, addressRefusal, embeddedIpv4 } from '../src/outbound/address-rules.js';
import { checkedAddress, postThroughDoor, urlFormProblem, type DoorSettings } from '../src/outbound/door.js';
import { DoorConnections } from '../src/outbound/door-connections.js';

const strict: DoorSettings = { allowHttp: false, allowLoopback: false, allowPrivate: false, connectTimeoutMs: 2_000, responseTimeoutMs: 2_000, responseMaxBytes: 1_024 };
const local: DoorSettings = { ...strict, allowHttp: true, allowLoopback: true };

describe('address rules (pure)', () => {
  it.each([
    ['8.8.8.8', 'public'],
    ['2606:4700:4700::1111', 'public'],
    ['127.0.0.1', 'loopback'],
    ['127.255.0.9', 'loopback'],
    ['::1', 'loopback'],
    ['::ffff:127.0.0.1', 'loopback'],
    ['::ffff:7f00:1', 'loopback'],
    ['10.1.2.3', 'private'],
    ['172.16.0.1', 'private'],
    ['172.31.255.255', 'private'],
    ['192.168.1.1', 'private'],
    ['fd12:3456::1', 'private'],
    ['169.254.169.254', 'metadata'],
    ['::ffff:169.254.169.254', 'metadata'],
    ['fd00:ec2::254', 'metadata'],
    ['169.254.10.10', 'link_local'],
    ['fe80::1', 'link_local'],
    ['100.64.0.1', 'cgnat'],
    ['100.127.255.254', 'cgnat'],
    ['0.0.0.0', 'unspecified'],
    ['::', 'unspecified'],
    ['224.0.0.1', 'multicast'],
    ['ff02::1', 'multicast'],
    ['192.0.2.1', 'reserved'],
    ['255.255.255.255', 'reserved'],
    ['64:ff9b::a00:1', 'private'],
  ])('%s is %s', (address, kind) => {
    expect(addressKind(address)).toBe(kind);
  });

  it('reads the IPv4 address inside mapped, compatible and NAT64 forms', () => {
    expect(embeddedIpv4('::ffff:10.0.0.1')).toBe('10.0.0.1');
    expect(embeddedIpv4('64:ff9b::7f00:1')).toBe('127.0.0.1');
    expect(embeddedIpv4('2001:db8::1')).toBeNull();
  });

  it('the operator allows loopback, or private networks; metadata and link-local never', () => {
    expect(addressRefusal('127.0.0.1', strict)).toMatch(/loopback/);
    expect(addressRefusal('127.0.0.1', local)).toBeNull();
    expect(addressRefusal('10.0.0.1', { ...strict, allowPrivate: true })).toBeNull();
    expect(addressRefusal('169.254.169.254', { allowLoopback: true, allowPrivate: true })).toMatch(/metadata/);
    expect(addressRefusal('fe80::1', { allowLoopback: true, allowPrivate: true })).toMatch(/link-local/);
  });
});

describe('URL form', () => {
  it.each([
    ['http://hooks.example.com/x', /https/],
    ['https://user:pw@hooks.example.com/x', /credentials/],
    ['https://user@hooks.example.com/x', /credentials/],
    ['ftp://hooks.example.com/x', /https/],
    ['hooks.example.com/x', /absolute URL/],
    ['https://hooks.example.com/x#frag', /fragment/],
    [`https://hooks.example.com/${'a'.repeat(2_100)}`, /2048/],
    ['https://hooks.example.com/ü', /visible ASCII/],
  ])('%s is refused', (url, problem) => {
    expect(urlFormProblem(url, strict)).toMatch(problem);
  });
  it('an https URL with a port and a query is fine; http only when allowed', () => {
    expect(urlFormProblem('https://hooks.example.com:8443/x?y=1', strict)).toBeNull();
    expect(urlFormProblem('http://hooks.example.com/x', local)).toBeNull();
  });
});

describe('the door against real servers on loopback', () => {
  let port = 0;
  const seen: Array<{ host: string | undefined; path: string | undefined }> = [];
  /** TCP connections the server accepted. */
  let connections = 0;
  /** Requests each accepted socket has served, to drop a reused one on /drop-reused. */
  const servedBy = new WeakMap<object, number>();
  const server = createServer((request, response) => {
    seen.push({ host: request.headers.host, path: request.url });
    const served = (servedBy.get(request.socket) ?? 0) + 1;
    servedBy.set(request.socket, served);
    if (request.url === '/drop-reused' && served > 1) {
      // As a receiver closing a kept-alive connection just as a request goes on it: no answer.
      request.socket.destroy();
    } else if (request.url === '/big') {
      response.writeHead(200);
      response.end('x'.repeat(100_000));
    } else if (request.url === '/slow') {
      // Never answers: the response time bound ends it.
      request.on('close', () => response.destroy());
    } else {
      response.writeHead(204);
      response.end();
    }
  });
  server.on('connection', () => (connections += 1));
  beforeAll(async () => {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as { port: number }).port;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it('every resolved address is checked: one private address among public ones refuses the host', async () => {
    const resolve = async () => [
      { address: '93.184.216.34', family: 4 },
      { address: '10.0.0.7', family: 4 },
    ];
    await expect(checkedAddress('https://mixed.example/x', { ...strict, resolve })).rejects.toThrow(/mixed\.example resolves to 10\.0\.0\.7 is a private network address/);
    await expect(checkedAddress('https://[::ffff:169.254.169.254]/x', strict)).rejects.toThrow(/metadata/);
    await expect(checkedAddress('https://169.254.169.254/latest/meta-data', { ...strict, allowLoopback: true, allowPrivate: true })).rejects.toThrow(/metadata/);
  });

  it('connects to the address it checked, not to a second answer: the name is only the Host header', async () => {
    let lookups = 0;
    // A rebinding resolver: a loopback address the first time, anything else afterwards.
    const resolve = async () => (lookups++ === 0 ? [{ address: '127.0.0.1', family: 4 }] : [{ address: '10.9.9.9', family: 4 }]);
    const answer = await postThroughDoor(`http://rebind.test:${port}/hook`, {}, '{}', { ...local, resolve });
    expect(answer).toMatchObject({ statusCode: 204, error: null });
    expect(lookups).toBe(1);
    expect(seen.at(-1)).toEqual({ host: `rebind.test:${port}`, path: '/hook' });
  });

  it('bounds the bytes it reads and the time it waits', async () => {
    const big = await postThroughDoor(`http://127.0.0.1:${port}/big`, {}, '{}', local);
    expect(big.statusCode).toBe(200);
    expect(big.bodyBytes).toBe(1_024);
    expect(big.error).toMatch(/longer than 1024 bytes/);
    const slow = await postThroughDoor(`http://127.0.0.1:${port}/slow`, {}, '{}', { ...local, responseTimeoutMs: 300 });
    expect(slow).toMatchObject({ statusCode: null, error: expect.stringMatching(/no complete response within 300 ms/) });
    expect(slow.durationMs).toBeLessThan(5_000);
  });

  it('refuses without connecting: loopback not allowed, http not allowed', async () => {
    const before = seen.length;
    expect(await postThroughDoor(`http://127.0.0.1:${port}/x`, {}, '{}', { ...local, allowLoopback: false })).toMatchObject({ statusCode: null, error: expect.stringMatching(/loopback/) });
    expect(await postThroughDoor(`http://127.0.0.1:${port}/x`, {}, '{}', { ...local, allowHttp: false })).toMatchObject({ statusCode: null, error: expect.stringMatching(/https/) });
    expect(seen.length).toBe(before);
  });

  const pooled = () => new DoorConnections({ idleMs: 4_000, maxOrigins: 8, maxSocketsPerOrigin: 2 });

  it('kept-alive connections: deliveries one after another to one endpoint go on one TCP connection', async () => {
    const pool = pooled();
    try {
      const before = connections;
      for (let i = 0; i < 5; i += 1) expect(await postThroughDoor(`http://127.0.0.1:${port}/x`, {}, '{}', local, pool)).toMatchObject({ statusCode: 204, error: null });
      expect(connections - before).toBe(1);
      // Without a pool, a connection each.
      const unpooled = connections;
      for (let i = 0; i < 2; i += 1) await postThroughDoor(`http://127.0.0.1:${port}/x`, {}, '{}', local);
      expect(connections - unpooled).toBe(2);
    } finally {
      pool.close();
    }
  });

  it('a pooled connection is reused only to the address checked now: a host rebound to a refused address is refused, nothing is sent', async () => {
    const pool = pooled();
    try {
      let answer = '127.0.0.1';
      const resolve = async () => [{ address: answer, family: 4 }];
      const settings = { ...local, resolve };
      expect(await postThroughDoor(`http://rebind.test:${port}/hook`, {}, '{}', settings, pool)).toMatchObject({ statusCode: 204 });
      const before = { seen: seen.length, connections };
      answer = '10.9.9.9';
      expect(await postThroughDoor(`http://rebind.test:${port}/hook`, {}, '{}', settings, pool)).toMatchObject({ statusCode: null, error: expect.stringMatching(/10\.9\.9\.9 is a private network address/) });
      // The operator's rules are what they were: loopback refused now refuses the kept-alive one too.
      answer = '127.0.0.1';
      expect(await postThroughDoor(`http://rebind.test:${port}/hook`, {}, '{}', { ...settings, allowLoopback: false }, pool)).toMatchObject({ statusCode: null, error: expect.stringMatching(/loopback/) });
      expect(seen.length).toBe(before.seen);
      expect(connections).toBe(before.connections);
    } finally {
      pool.close();
    }
  });

  it('a kept-alive connection the receiver dropped: the request goes once more on a new connection, within the same attempt', async () => {
    const pool = pooled();
    try {
      const before = { seen: seen.length, connections };
      expect(await postThroughDoor(`http://127.0.0.1:${port}/drop-reused`, {}, '{}', local, pool)).toMatchObject({ statusCode: 204, error: null });
      expect(await postThroughDoor(`http://127.0.0.1:${port}/drop-reused`, {}, '{}', local, pool)).toMatchObject({ statusCode: 204, error: null });
      // The second request reached the reused connection (dropped there) and then a new one.
      expect(seen.length - before.seen).toBe(3);
      expect(connections - before.connections).toBe(2);
    } finally {
      pool.close();
    }
  });

  it('the time bound holds on a kept-alive connection', async () => {
    const pool = pooled();
    try {
      expect(await postThroughDoor(`http://127.0.0.1:${port}/x`, {}, '{}', local, pool)).toMatchObject({ statusCode: 204 });
      const slow = await postThroughDoor(`http://127.0.0.1:${port}/slow`, {}, '{}', { ...local, responseTimeoutMs: 300 }, pool);
      expect(slow).toMatchObject({ statusCode: null, error: expect.stringMatching(/no complete response within 300 ms/) });
      expect(slow.durationMs).toBeLessThan(5_000);
    } finally {
      pool.close();
    }
  });
});
