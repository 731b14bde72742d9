import { chargeWorkflowId } from '../../src/domain/charge.js';
import { chargeBody } from './charging.js';
import type { BenchContext } from './context.js';
import { openPopulation } from './population.js';
import type { TemporalSession } from './session.js';

/**
 * Whether ChargeWorkflow runs its ledger steps as activities or local activities, read from the
 * history of one real charge rather than assumed: P1's baseline must have the same shape.
 */
export async function detectLedgerStepKind(ctx: BenchContext, session: TemporalSession, label = 'main'): Promise<'local' | 'remote'> {
  const population = await openPopulation(ctx.ledger, { tenant: `bench-${ctx.runId}-shape-${label}`, payers: 1, payees: 1 });
  const key = 'shape-probe';
  const reply = await session.charges.charge(population.tenant, key, chargeBody(key, population.payers[0]!, population.payees[0]!));
  if (reply.charge.status !== 'succeeded') throw new Error(`shape probe charge ended ${reply.charge.status}`);
  const history = await session.temporal.workflow.getHandle(chargeWorkflowId(population.tenant, key)).fetchHistory();
  const types = (history.events ?? []).map((event) => String(event.eventType));
  // eventType is an enum number or name depending on the decoder; both spellings are checked.
  const scheduled = types.some((t) => t === 'EVENT_TYPE_ACTIVITY_TASK_SCHEDULED' || t === '10');
  return scheduled ? 'remote' : 'local';
}
