import { startChaosDevServer, type ChaosTemporal } from './infrastructure.js';

/** The Temporal servers a chaos run can run and restart. */
export const chaosTemporalStarters = {
  dev: startChaosDevServer,
} satisfies Record<string, (dataDir: string) => Promise<ChaosTemporal>>;

export type ChaosTemporalKind = keyof typeof chaosTemporalStarters;
