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

/** Process `root` and every descendant of it, found by their parents in /proc (read here, not by the product's code). */
export function processTree(root: number): number[] {
  const childrenOf = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // ended since the listing
    }
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    childrenOf.set(ppid, [...(childrenOf.get(ppid) ?? []), Number(entry)]);
  }
  const tree = [root];
  for (let i = 0; i < tree.length; i += 1) tree.push(...(childrenOf.get(tree[i]!) ?? []));
  return tree;
}

/** The niceness of every thread of `root` and of its descendants, as one set. */
export function nicenessOfProcessTree(root: number): Set<number> {
  return new Set(processTree(root).flatMap((pid) => {
    try {
      return nicenessOfEveryThread(pid);
    } catch {
      return []; // ended since the listing
    }
  }));
}
