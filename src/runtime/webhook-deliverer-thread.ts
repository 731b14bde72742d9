import { parentPort, workerData } from 'node:worker_threads';
import { startWebhookDeliverer } from './webhook-deliverer.js';
import type { DelivererThreadData, DelivererThreadMessage, DelivererThreadRequest } from './webhook-deliverer-threaded.js';

/**
 * The body of the deliverer's thread (webhook-deliverer-threaded.ts starts it): the same deliverer
 * and pruner as in-line, on this thread's event loop and heap. Asked to stop, it stops them, says
 * so and lets the thread end (nothing else keeps it alive).
 */
const port = parentPort;
if (port === null) throw new Error('webhook-deliverer-thread runs only as a worker thread');
const { config, databaseUrl, onlyTenants } = workerData as DelivererThreadData;
const send = (message: DelivererThreadMessage): void => port.postMessage(message);
const running = startWebhookDeliverer({ ...config, WEBHOOK_DELIVERY: 'on' }, databaseUrl, {
  log: (line) => send({ type: 'log', line }),
  ...(onlyTenants ? { onlyTenants } : {}),
});
port.on('message', (request: DelivererThreadRequest) => {
  if (request.type !== 'stop') return;
  void (async () => {
    await running?.stop();
    send({ type: 'stopped' });
    port.close();
  })();
});
send({ type: 'started' });
