import { Admin } from '@platformatic/kafka';

/** Retries of one reading inside the client, and the pause between them: a reading fails in about a second, not ten. */
const readRetries = 2;
const readRetryDelayMs = 250;

/**
 * A consumer group's lag on one topic, per partition: the topic's end offset less the group's
 * committed offset (the whole partition when the group has committed nothing there).
 *
 * Why an admin client of its own rather than the intake's consumer: after a broker restart the
 * consumer's stream fails and the intake closes that consumer and joins with a new one; a reading
 * made through the old consumer retried against its stale connection and leader epochs until the
 * close cut it off ("listOffsets failed 10 times"). This client outlives consumers, asks the group
 * coordinator (so it sees the whole group's commits, not only the partitions one consumer holds),
 * and a reading that fails is made once more on a fresh client, with fresh metadata and sockets.
 */
export class GroupLag {
  private admin: Admin;

  constructor(
    private readonly brokers: string[],
    private readonly groupId: string,
    private readonly topic: string,
  ) {
    this.admin = this.newAdmin();
  }

  async read(): Promise<Map<number, bigint>> {
    try {
      return await this.readOnce();
    } catch {
      const stale = this.admin;
      this.admin = this.newAdmin();
      await stale.close().catch(() => undefined);
      return this.readOnce();
    }
  }

  async close(): Promise<void> {
    await this.admin.close();
  }

  private newAdmin(): Admin {
    return new Admin({ clientId: 'chargeguard-group-lag', bootstrapBrokers: this.brokers, retries: readRetries, retryDelay: readRetryDelayMs });
  }

  private async readOnce(): Promise<Map<number, bigint>> {
    const metadata = await this.admin.metadata({ topics: [this.topic], forceUpdate: true });
    const partitionsCount = metadata.topics.get(this.topic)?.partitionsCount;
    if (partitionsCount === undefined) throw new Error(`topic ${this.topic} is not on the cluster`);
    const partitionIndexes = Array.from({ length: partitionsCount }, (_, index) => index);
    const [ends, groups] = await Promise.all([
      this.admin.listOffsets({ topics: [{ name: this.topic, partitions: partitionIndexes.map((partitionIndex) => ({ partitionIndex, timestamp: -1n })) }] }),
      this.admin.listConsumerGroupOffsets({ groups: [{ groupId: this.groupId, topics: [{ name: this.topic, partitionIndexes }] }] }),
    ]);
    const endOf = new Map((ends.find((t) => t.name === this.topic)?.partitions ?? []).map((p) => [p.partitionIndex, p.offset]));
    const committedOf = new Map(
      (groups.find((g) => g.groupId === this.groupId)?.topics.find((t) => t.name === this.topic)?.partitions ?? []).map((p) => [p.partitionIndex, p.committedOffset]),
    );
    const out = new Map<number, bigint>();
    for (const partition of partitionIndexes) {
      const end = endOf.get(partition);
      if (end === undefined) throw new Error(`no end offset for ${this.topic}/${partition}`);
      const committed = committedOf.get(partition) ?? -1n;
      out.set(partition, committed < 0n ? end : end - committed);
    }
    return out;
  }
}
