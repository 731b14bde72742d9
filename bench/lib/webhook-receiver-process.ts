/**
 * The bench's webhook receiver, in a process of its own (started by startLoopbackReceiver): a plain
 * HTTP server on loopback answering 204 as soon as a request has been read. A real receiver runs
 * elsewhere; here it at least stays off the event loop of the bench's workers and deliverer, and
 * its arrival times are not delayed by theirs. No signature check: a receiver's work is not what is
 * measured. It reports, when asked, the webhook-ids that arrived since its last report, each with
 * the time its request had been read (Date.now(), the machine's clock); or, cheaper, only how many
 * distinct webhook-ids it has had (a wait inside a measured block should not load the machine).
 */
import { createServer } from 'node:http';
import type { ReceiverMessage, ReceiverReport } from './webhook-receiver.js';

const seen = new Set<string>();
let arrivals: [string, number][] = [];
let duplicates = 0;

const server = createServer((request, response) => {
  request.resume();
  request.on('end', () => {
    const at = Date.now();
    const id = request.headers['webhook-id'];
    if (typeof id === 'string') {
      if (seen.has(id)) duplicates++;
      else {
        seen.add(id);
        arrivals.push([id, at]);
      }
    }
    response.writeHead(204);
    response.end();
  });
});

function send(message: ReceiverMessage): void {
  process.send?.(message);
}

process.on('message', (message: { type?: string }) => {
  if (message.type === 'count') {
    send({ type: 'count', unique: seen.size, duplicates });
  } else if (message.type === 'report') {
    const report: ReceiverReport = { type: 'report', arrivals, duplicates };
    arrivals = [];
    send(report);
  }
});
// Stopped by SIGTERM (the default action); orphaned (the bench died): stop too.
process.on('disconnect', () => process.exit(0));

server.listen(0, '127.0.0.1', () => send({ type: 'listening', port: (server.address() as { port: number }).port }));
