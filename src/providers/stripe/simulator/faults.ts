/**
 * Faults the simulator injects on demand, each for the next N matching requests. "Commit" is the
 * moment the simulated Stripe changed its state and saved the key's answer: a fault before it leaves
 * nothing behind, a fault after it leaves the payment changed and the answer saved, but lost on the
 * way back.
 */
import { z } from 'zod';

export const operations = [
  'create_payment_intent',
  'retrieve_payment_intent',
  'capture_payment_intent',
  'cancel_payment_intent',
  'list_payment_intents',
  'search_payment_intents',
  'create_refund',
  'list_refunds',
] as const;
export type Operation = (typeof operations)[number];

const serverErrorStatus = z.union([z.literal(500), z.literal(502), z.literal(503), z.literal(504)]);
/** A held request is released by `releaseHolds()` or after holdMs, whichever comes first. */
const holdMs = z.number().int().positive().optional();

export const faultSchema = z.discriminatedUnion('kind', [
  /** 429 rate_limit_error before anything runs. */
  z.object({ kind: z.literal('rate_limit') }),
  /** 5xx before anything runs (a front end failing): nothing changes, the key stays free. */
  z.object({ kind: z.literal('error_before_commit'), status: serverErrorStatus.default(503) }),
  /** The request runs and its answer is saved, but the caller gets a 5xx instead. */
  z.object({ kind: z.literal('error_after_commit'), status: serverErrorStatus.default(500) }),
  /** The request runs and its answer is saved, then the connection is dropped without an answer. */
  z.object({ kind: z.literal('drop_after_commit') }),
  /** The request waits with its key in flight (a retry meanwhile gets 409), then runs. */
  z.object({ kind: z.literal('hold_before_commit'), holdMs }),
  /** The request runs, then its answer waits (the caller times out). */
  z.object({ kind: z.literal('hold_after_commit'), holdMs }),
]);
export type Fault = z.infer<typeof faultSchema>;
export type FaultInput = z.input<typeof faultSchema>;

export const faultRuleSchema = z.object({
  fault: faultSchema,
  /** Only requests to this operation; every operation when absent. */
  operation: z.enum(operations).optional(),
  /** How many matching requests it strikes. */
  times: z.number().int().positive().default(1),
  /**
   * Only requests whose Idempotency-Key starts with this (a charge's id strikes only that charge's
   * steps, so tests running side by side do not fault each other); any request when absent.
   */
  idempotencyKeyPrefix: z.string().min(1).max(255).optional(),
});
export type FaultRuleInput = z.input<typeof faultRuleSchema>;

interface ActiveRule {
  fault: Fault;
  operation: Operation | undefined;
  idempotencyKeyPrefix: string | undefined;
  remaining: number;
}

interface Hold {
  release: () => void;
}

export class Faults {
  private rules: ActiveRule[] = [];
  private readonly holds = new Set<Hold>();

  add(input: FaultRuleInput): void {
    const rule = faultRuleSchema.parse(input);
    this.rules.push({ fault: rule.fault, operation: rule.operation, idempotencyKeyPrefix: rule.idempotencyKeyPrefix, remaining: rule.times });
  }

  clear(): void {
    this.rules = [];
  }

  /** Disarms the rules armed for one idempotency key prefix, leaving the others'. */
  clearFor(idempotencyKeyPrefix: string): void {
    this.rules = this.rules.filter((rule) => rule.idempotencyKeyPrefix !== idempotencyKeyPrefix);
  }

  /** The fault for this request, if one is armed for its operation (each strike uses one). */
  take(operation: Operation, idempotencyKey: string | null = null): Fault | null {
    const rule = this.rules.find(
      (r) =>
        (r.operation === undefined || r.operation === operation) &&
        (r.idempotencyKeyPrefix === undefined || (idempotencyKey ?? '').startsWith(r.idempotencyKeyPrefix)),
    );
    if (!rule) return null;
    rule.remaining -= 1;
    if (rule.remaining === 0) this.rules = this.rules.filter((r) => r !== rule);
    return rule.fault;
  }

  get pending(): number {
    return this.rules.reduce((sum, rule) => sum + rule.remaining, 0);
  }

  /** Requests waiting in a hold right now. */
  get held(): number {
    return this.holds.size;
  }

  hold(ms: number | undefined): Promise<void> {
    return new Promise<void>((resolve) => {
      const hold: Hold = {
        release: () => {
          clearTimeout(timer);
          this.holds.delete(hold);
          resolve();
        },
      };
      const timer = ms === undefined ? undefined : setTimeout(hold.release, ms);
      this.holds.add(hold);
    });
  }

  /** Lets every held request go on; returns how many there were. */
  releaseHolds(): number {
    const held = [...this.holds];
    for (const hold of held) hold.release();
    return held.length;
  }
}
