import { startChaosCluster, startChaosDevServer, type ChaosTemporalStarter } from './infrastructure.js';

/** The Temporal servers a chaos run can run and restart. */
export const chaosTemporalStarters = {
  cluster: startChaosCluster,
  dev: startChaosDevServer,
} satisfies Record<string, ChaosTemporalStarter>;

export type ChaosTemporalKind = keyof typeof chaosTemporalStarters;
