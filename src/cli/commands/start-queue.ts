import { join, resolve } from 'node:path';
import type { ChargeguardConfig } from '../../config.js';
import { eventStreamDefaults, EventStreamPublisher } from '../../queue/event-stream.js';
import { ChargeIntake } from '../../queue/intake.js';
import { serveIntakeMetrics } from '../../queue/metrics.js';
import { intakeSettings, parseBrokers } from '../../queue/settings.js';
import type { AppContext } from '../../runtime/app-context.js';
import { startKafkaBroker, type KafkaBroker } from '../../stack/kafka.js';
import { step } from '../../support/progress.js';

export interface StartedQueue {
  brokers: string;
  /** What the banner says about it. */
  lines: string[];
  failed: Promise<never>;
  stop(): Promise<void>;
}

/**
 * `start --kafka`: a single-node broker in the data dir (or the cluster KAFKA_BROKERS names) and a
 * queue intake in this process, on the same service as the API (docs/queues.md). More consumers
 * join its group with `chargeguard consume`.
 */
export async function startQueueIntake(config: ChargeguardConfig, context: AppContext): Promise<StartedQueue> {
  let broker: KafkaBroker | null = null;
  if (config.KAFKA_BROKERS === undefined) {
    const dataDir = resolve(config.CHARGEGUARD_DATA_DIR);
    broker = await step('starting Kafka (single node, KRaft)', () =>
      startKafkaBroker({ dataDir: join(dataDir, 'kafka'), logFilePath: join(dataDir, 'logs', 'kafka.log') }),
    );
  }
  const brokers = broker?.brokers ?? config.KAFKA_BROKERS!;
  try {
    const settings = intakeSettings(parseBrokers(brokers), {
      maxInFlightPerPartition: config.INTAKE_MAX_IN_FLIGHT_PER_PARTITION,
      outcomeWaitMs: config.INTAKE_OUTCOME_WAIT_MS,
    });
    const intake = new ChargeIntake({ context, settings, log: (line) => process.stderr.write(`${line}\n`) });
    await step('starting the queue intake', () => intake.start());
    const publisher = new EventStreamPublisher(context.eventStream, { ...eventStreamDefaults, brokers: settings.brokers }, {
      log: (line) => process.stderr.write(`${line}\n`),
      registry: intake.metrics.registry,
    });
    await publisher.start();
    const metrics = await serveIntakeMetrics(intake.metrics.registry, '127.0.0.1', 0);
    return {
      brokers,
      lines: [
        `  Kafka:           ${brokers}${broker === null ? ' (KAFKA_BROKERS)' : ' (single node, data in the data dir)'}`,
        `  queue intake:    requests ${settings.requestTopic}, results ${settings.resultTopic}, dead letters ${settings.deadLetterTopic}; metrics ${metrics.url}`,
        `  event stream:    ${eventStreamDefaults.topic} (keyed by object id)`,
      ],
      failed: intake.failed,
      stop: async () => {
        await intake.stop();
        await publisher.stop();
        await metrics.close();
        await broker?.stop();
      },
    };
  } catch (error) {
    await broker?.stop();
    throw error;
  }
}
