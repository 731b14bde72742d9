import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { Webhook } from 'standardwebhooks';

/** One request a receiver got. */
export interface Received {
  /** 1 for the first request this receiver got. */
  n: number;
  headers: IncomingHttpHeaders;
  body: string;
  at: number;
}

/** What a receiver answers a request with; `hold` delays the answer until it settles. */
export interface Answer {
  status: number;
  headers?: Record<string, string>;
  body?: string;
  hold?: Promise<unknown>;
}

/** A real HTTP server on loopback that records what it gets and answers as told. */
export interface Receiver {
  url: string;
  received: Received[];
  /** Requests being answered right now (held ones included). */
  inFlight(): number;
  /** The most requests that were being answered at once. */
  mostInFlight(): number;
  close(): Promise<void>;
}

export async function startReceiver(answer: (request: Received) => Answer | Promise<Answer> = () => ({ status: 200 })): Promise<Receiver> {
  const received: Received[] = [];
  let inFlight = 0;
  let mostInFlight = 0;
  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      inFlight += 1;
      mostInFlight = Math.max(mostInFlight, inFlight);
      const entry: Received = { n: received.length + 1, headers: request.headers, body: Buffer.concat(chunks).toString('utf8'), at: Date.now() };
      received.push(entry);
      void (async () => {
        try {
          const reply = await answer(entry);
          if (reply.hold) await reply.hold;
          response.writeHead(reply.status, reply.headers ?? {});
          response.end(reply.body ?? '');
        } catch (error) {
          response.writeHead(500);
          response.end(String(error));
        } finally {
          inFlight -= 1;
        }
      })();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('receiver is not listening on a TCP port');
  return {
    url: `http://127.0.0.1:${address.port}/hooks`,
    received,
    inFlight: () => inFlight,
    mostInFlight: () => mostInFlight,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Whether a received request verifies with the secret, as a consumer checks it with the official library. */
export function verifies(secret: string, request: Received): boolean {
  try {
    new Webhook(secret).verify(request.body, request.headers as Record<string, string>);
    return true;
  } catch {
    return false;
  }
}

/** A promise and the function that settles it. */
export function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { promise, open };
}
