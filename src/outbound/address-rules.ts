import { BlockList, SocketAddress, isIP } from 'node:net';

/**
 * Which addresses an outbound delivery may connect to (docs/webhook-endpoints.md, The outbound
 * door). A webhook endpoint's URL is chosen by a tenant, so without these rules a tenant could make
 * the service call into its own network: the cloud's metadata service (credentials), the database,
 * Temporal, an admin port on loopback. Every address a host name resolves to is checked, at
 * registration and again at each delivery, and the connection goes to the address that was checked.
 */
export type AddressKind =
  | 'public'
  | 'loopback'
  | 'private'
  | 'link_local'
  | 'metadata'
  | 'cgnat'
  | 'unspecified'
  | 'multicast'
  | 'reserved';

/** What the operator allows besides public addresses (tests and development allow loopback). */
export interface AddressPolicy {
  allowLoopback: boolean;
  allowPrivate: boolean;
}

const metadata = new BlockList();
// AWS, GCP, Azure, OpenStack, … (IPv4) and AWS's IPv6 instance metadata service.
metadata.addAddress('169.254.169.254', 'ipv4');
metadata.addAddress('fd00:ec2::254', 'ipv6');
// Alibaba Cloud's metadata service.
metadata.addAddress('100.100.100.200', 'ipv4');

function list(entries: Array<[string, number, 'ipv4' | 'ipv6']>): BlockList {
  const blocks = new BlockList();
  for (const [network, prefix, family] of entries) blocks.addSubnet(network, prefix, family);
  return blocks;
}

const unspecified = list([
  ['0.0.0.0', 8, 'ipv4'],
  ['::', 128, 'ipv6'],
]);
const loopback = list([
  ['127.0.0.0', 8, 'ipv4'],
  ['::1', 128, 'ipv6'],
]);
const linkLocal = list([
  ['169.254.0.0', 16, 'ipv4'],
  ['fe80::', 10, 'ipv6'],
]);
const cgnat = list([['100.64.0.0', 10, 'ipv4']]);
const privateNetworks = list([
  ['10.0.0.0', 8, 'ipv4'],
  ['172.16.0.0', 12, 'ipv4'],
  ['192.168.0.0', 16, 'ipv4'],
  ['fc00::', 7, 'ipv6'],
  // Site-local (deprecated, still routed privately by some networks).
  ['fec0::', 10, 'ipv6'],
]);
const multicast = list([
  ['224.0.0.0', 4, 'ipv4'],
  ['ff00::', 8, 'ipv6'],
]);
// IETF protocol assignments, documentation, benchmarking, reserved and broadcast; IPv6 discard and documentation.
const reserved = list([
  ['192.0.0.0', 24, 'ipv4'],
  ['192.0.2.0', 24, 'ipv4'],
  ['198.18.0.0', 15, 'ipv4'],
  ['198.51.100.0', 24, 'ipv4'],
  ['203.0.113.0', 24, 'ipv4'],
  ['240.0.0.0', 4, 'ipv4'],
  ['100::', 64, 'ipv6'],
  ['2001:db8::', 32, 'ipv6'],
]);

/**
 * The IPv4 address an IPv6 one carries, when it is one of the forms that reach IPv4 hosts:
 * IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`, deprecated), NAT64 (`64:ff9b::/96`).
 * Such an address is judged by the IPv4 address, so `::ffff:127.0.0.1` is loopback.
 */
export function embeddedIpv4(address: string): string | null {
  const words = expandIpv6(address);
  if (words === null) return null;
  const head = words.slice(0, 6);
  const mapped = head.slice(0, 5).every((w) => w === 0) && head[5] === 0xffff;
  const compatible = head.every((w) => w === 0) && (words[6] !== 0 || words[7]! > 1);
  const nat64 = words[0] === 0x64 && words[1] === 0xff9b && words.slice(2, 6).every((w) => w === 0);
  if (!mapped && !compatible && !nat64) return null;
  return [words[6]! >> 8, words[6]! & 0xff, words[7]! >> 8, words[7]! & 0xff].join('.');
}

/** The eight 16-bit words of an IPv6 address (with an embedded dotted quad), or null. */
function expandIpv6(address: string): number[] | null {
  if (isIP(address) !== 6) return null;
  let text = address.split('%')[0]!.toLowerCase();
  const quad = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (quad) {
    const bytes = quad[1]!.split('.').map(Number);
    text = text.slice(0, -quad[1]!.length) + `${((bytes[0]! << 8) | bytes[1]!).toString(16)}:${((bytes[2]! << 8) | bytes[3]!).toString(16)}`;
  }
  const [left, right] = text.includes('::') ? text.split('::') : [text, null];
  const leftWords = left ? left.split(':') : [];
  const rightWords = right ? right.split(':') : [];
  const fill = right === null ? 0 : 8 - leftWords.length - rightWords.length;
  const words = [...leftWords, ...Array<string>(fill).fill('0'), ...rightWords].map((w) => parseInt(w, 16));
  return words.length === 8 && words.every((w) => Number.isInteger(w) && w >= 0 && w <= 0xffff) ? words : null;
}

/** What kind of address this is (an IP literal, v4 or v6). */
export function addressKind(address: string): AddressKind {
  const family = isIP(address);
  if (family === 0) throw new Error(`not an IP address: ${address}`);
  if (family === 6) {
    const v4 = embeddedIpv4(address);
    if (v4 !== null) return addressKind(v4);
  }
  // Parsed once for the eight lists below (a string is parsed again by each list's check).
  const bare = new SocketAddress({ address: address.split('%')[0]!, family: family === 4 ? 'ipv4' : 'ipv6' });
  if (metadata.check(bare)) return 'metadata';
  if (unspecified.check(bare)) return 'unspecified';
  if (loopback.check(bare)) return 'loopback';
  if (linkLocal.check(bare)) return 'link_local';
  if (cgnat.check(bare)) return 'cgnat';
  if (privateNetworks.check(bare)) return 'private';
  if (multicast.check(bare)) return 'multicast';
  if (reserved.check(bare)) return 'reserved';
  if (address === '255.255.255.255') return 'reserved';
  return 'public';
}

/** Null when the policy lets a delivery connect to this address; else why not, in words. */
export function addressRefusal(address: string, policy: AddressPolicy): string | null {
  const kind = addressKind(address);
  if (kind === 'public') return null;
  if (kind === 'loopback' && policy.allowLoopback) return null;
  if ((kind === 'private' || kind === 'cgnat') && policy.allowPrivate) return null;
  const words: Record<Exclude<AddressKind, 'public'>, string> = {
    loopback: 'a loopback address',
    private: 'a private network address',
    link_local: 'a link-local address',
    metadata: "a cloud provider's metadata address",
    cgnat: 'a carrier-grade NAT (shared) address',
    unspecified: 'the unspecified address',
    multicast: 'a multicast address',
    reserved: 'a reserved or documentation address',
  };
  return `${address} is ${words[kind]}, which webhook deliveries may not reach`;
}
