/**
 * The queue intake's settings (docs/queues.md, Settings). Every limit is named with its unit.
 */
export interface IntakeSettings {
  /** host:port list of the Kafka cluster (KAFKA_BROKERS). */
  brokers: string[];
  /** The consumer group: every `chargeguard consume` process of one deployment shares it. */
  groupId: string;
  /** Charge requests: key = idempotency key, value = the create-charge body, headers = the signature. */
  requestTopic: string;
  /** Outcomes, keyed by the idempotency key: the charge as the API shows it, or the refusal. */
  resultTopic: string;
  /** Messages that can never be valid, with the reason; nothing was started for them. */
  deadLetterTopic: string;
  /**
   * Messages of one partition being decided at once, at most. A partition whose count reaches it
   * stops the fetch until one is done; offsets are still committed in order (the lowest undecided
   * message holds the commit back), so a crash replays at most this many messages per partition.
   */
  maxInFlightPerPartition: number;
  /** Partitions the intake creates its topics with when they do not exist (an existing topic is left as it is). */
  topicPartitions: number;
  /**
   * How long one message may wait for its charge to be decided, in ms, before its result is
   * published with the charge as it stands (pending). Within it, the service's wait is repeated.
   */
  outcomeWaitMs: number;
  /** Backoff between attempts at a message whose service call failed for a reason that may pass (Temporal or the database away), in ms. */
  retryInitialDelayMs: number;
  retryMaxDelayMs: number;
  /** The consumer group's session timeout, in ms: a consumer silent this long loses its partitions to the others. */
  sessionTimeoutMs: number;
}

export const intakeDefaults = {
  groupId: 'chargeguard-intake',
  requestTopic: 'chargeguard.charge-requests',
  resultTopic: 'chargeguard.charge-results',
  deadLetterTopic: 'chargeguard.charge-requests.dead-letter',
  maxInFlightPerPartition: 16,
  topicPartitions: 3,
  outcomeWaitMs: 120_000,
  retryInitialDelayMs: 200,
  retryMaxDelayMs: 5_000,
  sessionTimeoutMs: 10_000,
} as const;

/** KAFKA_BROKERS as a list: comma-separated host:port. */
export function parseBrokers(text: string): string[] {
  const brokers = text.split(',').map((b) => b.trim()).filter((b) => b !== '');
  for (const broker of brokers) {
    if (!/^[^\s:]+:[0-9]{1,5}$/.test(broker)) throw new Error(`KAFKA_BROKERS: "${broker}" is not host:port`);
  }
  if (brokers.length === 0) throw new Error('KAFKA_BROKERS is empty: set it to host:port[,host:port…]');
  return brokers;
}

export function intakeSettings(brokers: string[], overrides: Partial<IntakeSettings> = {}): IntakeSettings {
  return { ...intakeDefaults, brokers, ...overrides };
}
