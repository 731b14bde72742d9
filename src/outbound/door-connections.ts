import http from 'node:http';
import https from 'node:https';

/**
 * The deliverer's kept-alive connections (docs/webhook-endpoints.md, The outbound door). A new TCP
 * (and TLS) connection per delivery costs the deliverer, the kernel and the receiver more than the
 * delivery's request itself; one endpoint getting a stream of events reuses a few connections instead.
 *
 * A pool is kept per (origin, checked address): every request still has its host resolved and every
 * address checked (door.ts) first, and then takes a socket only from the pool of the very address
 * that check returned. A pooled socket was opened to that address, by the pinned lookup, so reuse
 * never reaches an address the rules have not passed: a host whose name now resolves elsewhere (DNS
 * rebinding) gets the new address checked and a pool of its own, or is refused before any socket is
 * chosen. Redirects are still not followed, and the time and byte bounds hold per request.
 */
export interface KeepAliveSettings {
  /** A connection idle this long is closed, milliseconds. Below common servers' own idle timeouts (Node's 5 s), so the receiver rarely closes one under a request. */
  idleMs: number;
  /** Pools (origin and address pairs) kept at most; the least recently used one's idle connections close beyond it. */
  maxOrigins: number;
  /** Connections open to one pool at most (the deliverer sets its per-endpoint concurrency). */
  maxSocketsPerOrigin: number;
}

export class DoorConnections {
  private readonly agents = new Map<string, http.Agent>();

  constructor(private readonly settings: KeepAliveSettings) {}

  /** The agent for requests to `origin` at `address` (the address the door just checked). */
  agentFor(protocol: 'http:' | 'https:', origin: string, address: string): http.Agent {
    const key = `${origin} ${address}`;
    let agent = this.agents.get(key);
    if (agent !== undefined) {
      // Most recently used last: the map's order is the eviction order.
      this.agents.delete(key);
      this.agents.set(key, agent);
      return agent;
    }
    const options: http.AgentOptions = {
      keepAlive: true,
      maxSockets: this.settings.maxSocketsPerOrigin,
      maxFreeSockets: this.settings.maxSocketsPerOrigin,
      // On a pooled socket's 'timeout' the agent closes it if idle; a request in flight has its own timers.
      timeout: this.settings.idleMs,
      scheduling: 'lifo',
    };
    agent = protocol === 'https:' ? new https.Agent(options) : new http.Agent(options);
    this.agents.set(key, agent);
    while (this.agents.size > this.settings.maxOrigins) {
      const [oldestKey, oldest] = this.agents.entries().next().value as [string, http.Agent];
      this.agents.delete(oldestKey);
      closeIdle(oldest);
    }
    return agent;
  }

  /** Closes every connection: call it once no request is in flight (the deliverer's stop). */
  close(): void {
    for (const agent of this.agents.values()) agent.destroy();
    this.agents.clear();
  }
}

/** An evicted pool: its idle sockets close now; a socket still in use goes back to it and closes after idleMs. */
function closeIdle(agent: http.Agent): void {
  for (const sockets of Object.values(agent.freeSockets)) for (const socket of sockets ?? []) socket.destroy();
}
