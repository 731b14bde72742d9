import { createWriteStream, mkdirSync, type WriteStream } from 'node:fs';
import { dirname } from 'node:path';

/**
 * Collects a child process's output: appends it to an optional log file and keeps the last lines
 * in memory, so a start failure can quote what the server said without re-reading the file.
 */
export class LogSink {
  private readonly recentLines: string[] = [];
  private partialLine = '';
  /** A Go server's first `panic:` line: its stack trace that follows can push it out of the recent lines, and it is the line that says why. */
  private panicLine: string | null = null;
  private readonly file: WriteStream | null;

  constructor(
    filePath: string | undefined,
    private readonly maxRecentLines = 40,
    /** Sees every whole line the child wrote (not our own notes): for watchers of a known failure's signature. */
    private readonly onLine?: (line: string) => void,
  ) {
    if (filePath === undefined) {
      this.file = null;
    } else {
      mkdirSync(dirname(filePath), { recursive: true });
      this.file = createWriteStream(filePath, { flags: 'a' });
      // A failing log file must not take the server down with it; the recent lines still tell why it stopped.
      this.file.on('error', (error) => process.stderr.write(`server log ${filePath} failed: ${error.message}\n`));
    }
  }

  write(chunk: Buffer | string): void {
    const text = typeof chunk === 'string' ? chunk : chunk.toString('utf8');
    this.file?.write(text);
    const lines = (this.partialLine + text).split('\n');
    this.partialLine = lines.pop() ?? '';
    for (const line of lines) {
      this.remember(line);
      this.onLine?.(line);
    }
  }

  /** Writes a line of our own (e.g. "starting …") so the log file explains itself. */
  note(line: string): void {
    const text = `[chargeguard ${new Date().toISOString()}] ${line}`;
    this.file?.write(`${text}\n`);
    this.remember(text);
  }

  tail(): string {
    const lines = this.partialLine === '' ? this.recentLines : [...this.recentLines, this.partialLine];
    if (this.panicLine !== null && !lines.includes(this.panicLine)) return [this.panicLine, '…', ...lines].join('\n');
    return lines.join('\n');
  }

  async close(): Promise<void> {
    const file = this.file;
    if (file === null || file.closed || file.destroyed) return;
    await new Promise<void>((resolve) => file.end(resolve));
  }

  private remember(line: string): void {
    if (line.trim() === '') return;
    if (this.panicLine === null && line.startsWith('panic: ')) this.panicLine = line;
    this.recentLines.push(line);
    if (this.recentLines.length > this.maxRecentLines) this.recentLines.shift();
  }
}
