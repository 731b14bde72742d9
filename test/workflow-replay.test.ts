import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import protoModule from '@temporalio/proto';
import { Worker } from '@temporalio/worker';
import { describe, expect, inject, it } from 'vitest';

// Histories recorded from real runs (scripts/record-workflow-histories.ts). Every workflow code
// change must still replay them: charges in flight during a deployment continue on the new code.
// A change that cannot replay them needs `patched()`, not a re-recording.

const History = protoModule.temporal.api.history.v1.History;
const EventType = protoModule.temporal.api.enums.v1.EventType;
const historiesDir = fileURLToPath(new URL('./histories', import.meta.url));

async function recordedHistories(): Promise<Array<{ name: string; bytes: Buffer }>> {
  const names = (await readdir(historiesDir)).filter((name) => name.endsWith('.history.pb')).sort();
  return Promise.all(names.map(async (name) => ({ name, bytes: await readFile(join(historiesDir, name)) })));
}

function replay(history: protoModule.temporal.api.history.v1.IHistory, name: string): Promise<void> {
  return Worker.runReplayHistory({ workflowBundle: { codePath: inject('stack').workflowBundlePath } }, history, name);
}

describe('recorded workflow histories replay on the current code', async () => {
  const histories = await recordedHistories();

  it('there is a recorded history for every path through the workflows', () => {
    expect(histories.map((h) => h.name.replace('.history.pb', ''))).toEqual([
      'charge-automatic-succeeded',
      'charge-confirm-failed-compensated',
      'charge-declined',
      'charge-manual-cancelled',
      'charge-manual-captured-partially',
      'charge-manual-hold-expired',
      'refund-partial',
    ]);
  });

  it.each(histories)('$name replays without nondeterminism', async ({ name, bytes }) => {
    await expect(replay(History.decode(bytes), name)).resolves.toBeUndefined();
  });

  it('a history the code did not produce is caught (the replay check can fail)', async () => {
    const original = History.decode(histories.find((h) => h.name.startsWith('charge-automatic'))!.bytes);
    // Pretend the old code scheduled a timer where the current code schedules the Try activity.
    const events: protoModule.temporal.api.history.v1.IHistoryEvent[] = original.events!.map((event) => {
      if (event.eventType !== EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED) return event;
      return {
        eventId: event.eventId,
        eventTime: event.eventTime,
        eventType: EventType.EVENT_TYPE_TIMER_STARTED,
        timerStartedEventAttributes: {
          timerId: '1',
          startToFireTimeout: {},
          workflowTaskCompletedEventId: event.activityTaskScheduledEventAttributes?.workflowTaskCompletedEventId,
        },
      };
    });
    await expect(replay({ events }, 'tampered')).rejects.toThrow(/nondetermin/i);
  });
});
