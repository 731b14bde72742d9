/** The baseline's three steps: each hands its input back, so only Temporal's own cost remains. */
export const baselineActivities = {
  async noopReserve(record: Record<string, unknown>): Promise<Record<string, unknown>> {
    return record;
  },
  async noopCapture(record: Record<string, unknown>): Promise<Record<string, unknown>> {
    return record;
  },
  async noopRecord(record: Record<string, unknown>): Promise<Record<string, unknown>> {
    return record;
  },
};

export type BaselineActivities = typeof baselineActivities;
