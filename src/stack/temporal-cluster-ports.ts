/**
 * The server records each service's ports in cluster_membership.rpc_port, a SMALLINT: a port above
 * 32767 makes the membership heartbeat fail and the server exit. The kernel's ephemeral range
 * (where port 0 binds) starts at 32768 on Linux, so the ports are picked below it
 * (findFreePortsBelow, src/support/free-port.ts).
 */
export const smallintPortCeiling = 32_767;

export { findFreePortsBelow } from '../support/free-port.js';
