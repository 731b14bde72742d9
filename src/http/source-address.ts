import { BlockList, isIPv4, isIPv6 } from 'node:net';

/**
 * Who a caller without a valid API key is, for its rate limits and for /metrics: the address of the
 * connection's peer, fastify's `request.ip`. The app does not trust proxy headers (fastify's
 * `trustProxy` is off), so X-Forwarded-For cannot choose a caller's bucket; behind a reverse proxy
 * or a load balancer every caller has the proxy's address (docs/limits.md says what that means).
 */

/** A dual-stack socket reports an IPv4 peer as ::ffff:a.b.c.d. */
const ipv4Mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i;

/** The address as it is compared: an IPv4-mapped IPv6 address as IPv4, a zone (%eth0) dropped. */
export function plainAddress(ip: string): string {
  const unzoned = ip.split('%')[0]!.toLowerCase();
  return ipv4Mapped.exec(unzoned)?.[1] ?? unzoned;
}

/** The eight 16-bit groups of a valid IPv6 address (`::` expanded, a trailing dotted quad converted). */
function ipv6Groups(address: string): number[] {
  let text = address;
  const quad = /(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(text);
  if (quad) {
    const [a, b, c, d] = quad.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, quad.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head = '', tail] = text.split('::');
  const headGroups = head === '' ? [] : head.split(':');
  const tailGroups = tail === undefined || tail === '' ? [] : tail.split(':');
  const zeros = tail === undefined ? [] : Array<string>(8 - headGroups.length - tailGroups.length).fill('0');
  return [...headGroups, ...zeros, ...tailGroups].map((group) => parseInt(group, 16));
}

/**
 * The bucket a source address takes from: an IPv4 address alone, an IPv6 address by its /64. A
 * single IPv6 host is usually given a whole /64 and can pick any address in it, so a bucket per
 * address would be a bucket per request. Not an IP address (no peer, a Unix socket): one shared bucket.
 */
export function limitSubjectOf(ip: string | undefined): string {
  if (!ip) return 'unknown';
  const plain = plainAddress(ip);
  if (isIPv4(plain)) return plain;
  if (!isIPv6(plain)) return 'unknown';
  return `${ipv6Groups(plain)
    .slice(0, 4)
    .map((group) => group.toString(16))
    .join(':')}::/64`;
}

const loopbackAddresses = new BlockList();
loopbackAddresses.addSubnet('127.0.0.0', 8, 'ipv4');
loopbackAddresses.addAddress('::1', 'ipv6');

/** Whether the peer is this host's loopback (127.0.0.0/8, ::1, or ::ffff:127.x.y.z). */
export function isLoopback(ip: string | undefined): boolean {
  if (!ip) return false;
  const plain = plainAddress(ip);
  if (isIPv4(plain)) return loopbackAddresses.check(plain, 'ipv4');
  return isIPv6(plain) && loopbackAddresses.check(plain, 'ipv6');
}
