import type { Command } from 'commander';
import { loadConfig } from '../../config.js';
import { eventStreamDefaults, EventStreamPublisher } from '../../queue/event-stream.js';
import { ChargeIntake } from '../../queue/intake.js';
import { serveIntakeMetrics } from '../../queue/metrics.js';
import { intakeSettings, parseBrokers } from '../../queue/settings.js';
import { openServiceContext } from '../../runtime/app-context.js';
import { installProcessSafetyNet } from '../../runtime/process-safety.js';
import { waitForStopReason } from '../shutdown.js';
import { runCommand } from './surface.js';

export function registerConsumeCommand(program: Command): void {
  program
    .command('consume')
    .description('take charge requests from a Kafka topic (KAFKA_BROKERS) against TEMPORAL_ADDRESS and DATABASE_URL; one consumer group, run as many as there are partitions (docs/queues.md)')
    .option('--group <id>', 'consumer group id', 'chargeguard-intake')
    .option('--metrics-host <host>', 'address /metrics listens on', '127.0.0.1')
    .option('--metrics-port <port>', 'port of /metrics (consumer lag, per-outcome counts); 0 picks a free one', '9464')
    .option('--no-events', 'do not publish the outbound events to the event stream (one consume process publishes at a time; the others stand by)')
    .action((options: { group: string; metricsHost: string; metricsPort: string; events: boolean }) =>
      runCommand({}, async () => {
        const safety = installProcessSafetyNet({ command: 'consume' });
        const config = loadConfig();
        if (!config.KAFKA_BROKERS) throw new Error('consume needs KAFKA_BROKERS (host:port of a Kafka cluster); `chargeguard start --kafka` starts one and prints it');
        const settings = intakeSettings(parseBrokers(config.KAFKA_BROKERS), {
          groupId: options.group,
          maxInFlightPerPartition: config.INTAKE_MAX_IN_FLIGHT_PER_PARTITION,
          outcomeWaitMs: config.INTAKE_OUTCOME_WAIT_MS,
        });
        const log = (line: string): void => void process.stderr.write(`${line}\n`);
        const context = await openServiceContext(config, log);
        try {
          const intake = new ChargeIntake({ context, settings, log });
          const publisher = options.events
            ? new EventStreamPublisher(context.eventStream, { ...eventStreamDefaults, brokers: settings.brokers }, { log, registry: intake.metrics.registry })
            : null;
          const metrics = await serveIntakeMetrics(intake.metrics.registry, options.metricsHost, Number(options.metricsPort));
          try {
            await intake.start();
            await publisher?.start();
            log(`consuming ${settings.requestTopic} on ${settings.brokers.join(',')} as group ${settings.groupId}; results to ${settings.resultTopic}, dead letters to ${settings.deadLetterTopic}; ${publisher ? `events to ${eventStreamDefaults.topic}; ` : ''}metrics ${metrics.url}`);
            const stop = await waitForStopReason(safety, { 'the intake': intake.failed });
            log(`stopping (${stop.reason})…`);
            await intake.stop();
            await publisher?.stop();
            if (stop.error !== undefined) throw stop.error;
          } finally {
            await metrics.close();
          }
        } finally {
          await context.close();
        }
      }),
    );
}
