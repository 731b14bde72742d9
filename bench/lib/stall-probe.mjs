/**
 * bench:overload's stall probe, preloaded into the API process it measures (`node --import`), never
 * shipped: plain JavaScript so the compiled CLI runs it without a TypeScript loader. It records, on
 * the epoch clock the caller's send times use, what could hold a request between the caller's send
 * and the API's onRequest:
 *   - loop gaps: a 10 ms timer that fired more than 40 ms late, with how the main thread spent the
 *     gap (/proc/thread-self/schedstat: on a CPU, waiting in the run queue for one, or neither,
 *     i.e. blocked in a system call);
 *   - GC pauses longer than 5 ms (perf_hooks 'gc');
 *   - writes to stdout/stderr (pino's destination), synchronous ones slower than 5 ms and
 *     asynchronous ones whose callback came after 20 ms, and how many lines were written in all;
 *   - new TCP connections, and how long a connection's first request took to arrive;
 *   - when each request with an Idempotency-Key was handed over by the HTTP parser.
 * The records are appended to STALL_PROBE_FILE as JSON lines, once a second.
 */
import diagnostics from 'node:diagnostics_channel';
import fs from 'node:fs';
import { PerformanceObserver, performance } from 'node:perf_hooks';

const file = process.env.STALL_PROBE_FILE;
if (file) {
  const epoch = () => performance.timeOrigin + performance.now();
  const pending = [];
  const record = (entry) => pending.push(JSON.stringify(entry));

  const schedstatPath = fs.existsSync('/proc/thread-self/schedstat') ? '/proc/thread-self/schedstat' : null;
  /** Main thread's time on a CPU and waiting for one, ns. */
  const sched = () => {
    if (!schedstatPath) return [NaN, NaN];
    const [onCpu, runQueue] = fs.readFileSync(schedstatPath, 'utf8').split(' ');
    return [Number(onCpu), Number(runQueue)];
  };

  const tickMs = 10;
  let last = { at: epoch(), sched: sched() };
  const tick = () => {
    const now = { at: epoch(), sched: sched() };
    const gapMs = now.at - last.at;
    if (gapMs > tickMs + 40) {
      const cpuMs = (now.sched[0] - last.sched[0]) / 1e6;
      const runQueueMs = (now.sched[1] - last.sched[1]) / 1e6;
      record({ kind: 'gap', from: last.at, ms: gapMs, cpuMs, runQueueMs });
    }
    last = now;
    setTimeout(tick, tickMs).unref();
  };
  setTimeout(tick, tickMs).unref();

  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      if (entry.duration > 5) record({ kind: 'gc', from: performance.timeOrigin + entry.startTime, ms: entry.duration, gcKind: entry.detail?.kind });
    }
  }).observe({ entryTypes: ['gc'] });

  let lines = 0;
  let bytes = 0;
  const writeSync = fs.writeSync;
  fs.writeSync = function timedWriteSync(fd, buffer, ...rest) {
    if (fd !== 1 && fd !== 2) return writeSync.call(this, fd, buffer, ...rest);
    const from = epoch();
    try {
      const written = writeSync.call(this, fd, buffer, ...rest);
      const text = typeof buffer === 'string' ? buffer : '';
      lines += text ? text.split('\n').length - 1 : 1;
      bytes += written;
      return written;
    } catch (error) {
      record({ kind: 'write-error', from, fd, code: error?.code });
      throw error;
    } finally {
      const ms = epoch() - from;
      if (ms > 5) record({ kind: 'write', from, ms, fd });
    }
  };

  // pino's default destination (sonic-boom, sync: false) writes with fs.write on the thread pool:
  // a slow reader of the pipe shows as a slow callback, not as a loop gap.
  const write = fs.write;
  fs.write = function timedWrite(fd, buffer, ...rest) {
    if (fd !== 1 && fd !== 2) return write.call(this, fd, buffer, ...rest);
    const from = epoch();
    const callback = rest.pop();
    lines += typeof buffer === 'string' ? buffer.split('\n').length - 1 : 1;
    return write.call(this, fd, buffer, ...rest, (error, written, ...more) => {
      const ms = epoch() - from;
      if (ms > 20) record({ kind: 'async-write', from, ms, fd });
      if (error) record({ kind: 'write-error', from, fd, code: error.code });
      else bytes += written;
      callback(error, written, ...more);
    });
  };

  let connections = 0;
  const connectedAt = new WeakMap();
  diagnostics.subscribe('net.server.socket', ({ socket }) => {
    connections += 1;
    connectedAt.set(socket, epoch());
  });
  diagnostics.subscribe('http.server.request.start', ({ request, socket }) => {
    const now = epoch();
    const at = connectedAt.get(socket);
    if (at !== undefined) connectedAt.delete(socket);
    if (at !== undefined && now - at > 20) record({ kind: 'first-request', from: at, ms: now - at, url: request.url });
    // Each charge create, by its key: when the HTTP parser handed it over (before fastify's onRequest),
    // and when its connection was accepted if it is the connection's first request.
    const key = request.headers['idempotency-key'];
    if (typeof key === 'string') record({ kind: 'request', key, at: now, ...(at !== undefined ? { connectedAt: at } : {}) });
  });

  const flush = () => {
    record({ kind: 'totals', at: epoch(), lines, bytes, connections });
    const text = `${pending.splice(0).join('\n')}\n`;
    fs.appendFile(file, text, (error) => {
      if (error) process.stderr.write(`stall probe: ${error.message}\n`);
    });
  };
  setInterval(flush, 1_000).unref();
}
