import { createHash, timingSafeEqual } from 'node:crypto';

const digest = (text: string): Buffer => createHash('sha256').update(text, 'utf8').digest();

/**
 * Whether a presented operator token (the codec's, the metrics') is the expected one, compared in
 * constant time: the digests have the same length whatever was sent.
 */
export function secretTokenMatches(expected: string, presented: string | null): boolean {
  if (presented === null) return false;
  return timingSafeEqual(digest(expected), digest(presented));
}
