/**
 * Single-fault mode: what the slowest key caught by a fault waited for. Its workflow history, read
 * after the run, as event types with their times from the fault: a workflow task that timed out, a
 * failed one, a start that came late say where the seconds went, where a bare "decided after 3.5 s"
 * does not.
 */
import type { Client } from '@temporalio/client';
import protoModule from '@temporalio/proto';
import { chargeWorkflowId } from '../src/domain/charge.js';
import type { InjectedFault } from './faults.js';

export interface SlowestKey {
  key: string;
  decidedAfterMs: number;
  /** Copies of the request the callers sent for it. */
  requests: number;
  /** `EventType +ms` from the fault, in history order; null when the history could not be read. */
  timeline: string | null;
}

// protobufjs enums map numbers back to names as well.
const eventTypeNames = protoModule.temporal.api.enums.v1.EventType as unknown as Record<number, string>;

/** Event types named as in the history JSON, without the prefix that every one shares. */
function eventName(eventType: number | null | undefined): string {
  const name = eventType == null ? 'Unknown' : (eventTypeNames[eventType] ?? String(eventType));
  return name.replace(/^EVENT_TYPE_/, '');
}

export async function slowestKeyOf(
  fault: InjectedFault,
  keys: ReadonlyArray<{ key: string; firstSentAtMs: number; decidedAtMs: number | null; requests: number }>,
  tenant: string,
  temporal: Client,
): Promise<SlowestKey | null> {
  const caught = keys.filter((key) => key.firstSentAtMs < fault.startedAtMs && key.decidedAtMs !== null && key.decidedAtMs >= fault.startedAtMs);
  const slowest = caught.reduce<(typeof caught)[number] | null>((worst, key) => (worst === null || key.decidedAtMs! > worst.decidedAtMs! ? key : worst), null);
  if (slowest === null) return null;
  let timeline: string | null = null;
  try {
    const history = await temporal.workflow.getHandle(chargeWorkflowId(tenant, slowest.key)).fetchHistory();
    timeline = (history.events ?? [])
      .map((event) => {
        const atMs = event.eventTime?.seconds == null ? null : Number(event.eventTime.seconds) * 1000 + Math.floor((event.eventTime.nanos ?? 0) / 1e6);
        return `${eventName(event.eventType)} ${atMs === null ? '?' : `${atMs - fault.startedAtMs >= 0 ? '+' : ''}${atMs - fault.startedAtMs}`}`;
      })
      .join(', ');
  } catch (error) {
    timeline = `history not read: ${(error as Error).message}`;
  }
  return { key: slowest.key, decidedAfterMs: slowest.decidedAtMs! - fault.startedAtMs, requests: slowest.requests, timeline };
}
