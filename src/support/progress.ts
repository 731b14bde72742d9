/**
 * A one-line progress display for anything that takes more than a few seconds: redrawn in place
 * on a terminal, a line every `plainIntervalMs` when output goes to a file or CI log.
 */
export class Progress {
  private lastPlainAtMs = 0;
  private readonly isTty = Boolean(process.stderr.isTTY);

  constructor(
    private readonly label: string,
    private readonly total: number,
    private readonly plainIntervalMs = 2_000,
  ) {}

  update(done: number, detail = ''): void {
    const percent = this.total === 0 ? 100 : Math.floor((done / this.total) * 100);
    const line = `${this.label}: ${done}/${this.total} (${percent}%)${detail ? ` ${detail}` : ''}`;
    if (this.isTty) {
      process.stderr.write(`\r\x1b[2K${line}`);
      return;
    }
    const nowMs = Date.now();
    if (nowMs - this.lastPlainAtMs >= this.plainIntervalMs || done === this.total) {
      this.lastPlainAtMs = nowMs;
      process.stderr.write(`${line}\n`);
    }
  }

  finish(summary: string): void {
    if (this.isTty) process.stderr.write('\r\x1b[2K');
    process.stderr.write(`${this.label}: ${summary}\n`);
  }
}

/** Prints a status line while a slow step (server start, migration) runs. */
export async function step<T>(label: string, run: () => Promise<T>): Promise<T> {
  const startedAtMs = Date.now();
  process.stderr.write(`${label}…\n`);
  const result = await run();
  process.stderr.write(`${label}: done in ${Date.now() - startedAtMs} ms\n`);
  return result;
}
