import { randomInt } from 'node:crypto';

const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
/** Stripe's ids carry 24 characters after the prefix. */
const idBodyLength = 24;

/** An id shaped like Stripe's (`pi_…`, `re_…`, `evt_…`, `req_…`). */
export function stripeLikeId(prefix: string): string {
  let body = '';
  for (let i = 0; i < idBodyLength; i++) body += alphabet[randomInt(alphabet.length)];
  return `${prefix}_${body}`;
}
