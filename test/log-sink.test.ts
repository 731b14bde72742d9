import { describe, expect, it } from 'vitest';
import { LogSink } from '../src/support/log-sink.js';

describe('a server\'s recent output, as a start failure quotes it', () => {
  it('keeps the last lines, and a Go panic\'s first line even when its stack trace pushed it out', () => {
    const sink = new LogSink(undefined, 3);
    sink.write('starting\npanic: listen tcp 127.0.0.1:7233: bind: address already in use\n');
    sink.write('goroutine 1 [running]:\nmain.main()\n\t/src/main.go:18 +0x78\nexit status 2\n');
    expect(sink.tail()).toBe('panic: listen tcp 127.0.0.1:7233: bind: address already in use\n…\nmain.main()\n\t/src/main.go:18 +0x78\nexit status 2');
  });

  it('quotes the panic once, where it still is among the last lines', () => {
    const sink = new LogSink(undefined, 3);
    sink.write('panic: boom\ngoroutine 1 [running]:\n');
    expect(sink.tail()).toBe('panic: boom\ngoroutine 1 [running]:');
  });
});
