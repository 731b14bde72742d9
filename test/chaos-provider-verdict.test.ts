import { describe, expect, it } from 'vitest';
import { authenticatedThenCancelledUnasked } from '../chaos/provider.js';
import { newStorm, type KeyRecord } from '../chaos/storm.js';

/**
 * The provider verdict's count of 3-D Secure charges whose payer authenticated and which ended
 * cancelled: a payment lost without the caller asking. A manual charge the storm cancelled once
 * reserved was cancelled because its caller asked; a create copy still in flight then answers
 * cancelled too, which the count took for a lost payment.
 */
function cardKey(key: string, fields: Partial<KeyRecord>): KeyRecord {
  return {
    key,
    amountMinor: 100,
    shape: 'concurrent',
    paymentMethod: 'pm_card_threeDSecure2Required',
    paymentId: `pi_${key}`,
    payerActed: 'succeed',
    payerActedAtMs: 1_000,
    manual: null,
    settled: null,
    settleSent: false,
    outcomes: new Set(),
    cancelReasons: new Set(),
    requests: 1,
    firstSentAtMs: 0,
    decidedAtMs: null,
    ...fields,
  };
}

describe('chaos provider verdict: payer authenticated, charge cancelled unasked', () => {
  it('counts a cancelled charge whose payer authenticated, unless its caller cancelled it', () => {
    const storm = newStorm();
    const records = [
      cardKey('lost-automatic', { outcomes: new Set(['cancelled']), cancelReasons: new Set(['payer_action_expired']) }),
      cardKey('lost-manual', { manual: 'capture', outcomes: new Set(['reserved', 'cancelled']), settled: null }),
      // The storm cancelled it once reserved; a copy in flight answered what the cancel did.
      cardKey('asked', { manual: 'cancel', outcomes: new Set(['reserved', 'cancelled']), settled: 'cancelled' }),
      cardKey('succeeded', { outcomes: new Set(['succeeded']) }),
      cardKey('payer-failed', { payerActed: 'fail', outcomes: new Set(['cancelled']) }),
      cardKey('payer-never-acted', { payerActed: null, payerActedAtMs: null, outcomes: new Set(['cancelled']) }),
    ];
    for (const record of records) storm.keys.set(record.key, record);
    expect(authenticatedThenCancelledUnasked(storm.keys.values()).map((record) => record.key)).toEqual(['lost-automatic', 'lost-manual']);
  });
});
