import { readdirSync, readFileSync } from 'node:fs';

/**
 * The niceness of every thread of `pid`, read here from /proc (field 19 of each task's stat) rather
 * than through the product's own reader, so that a mistake in one is not confirmed by the other.
 */
export function nicenessOfEveryThread(pid: number): number[] {
  return readdirSync(`/proc/${pid}/task`).flatMap((tid) => {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
    } catch {
      return []; // the thread ended since the listing
    }
    const afterName = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return [Number(afterName[19 - 3])];
  });
}
