import { relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * The files that run longest, longest first, as measured (docs/testing.md, The longest files).
 * Vitest runs the files it has timings for longest first, but it keeps those timings under
 * node_modules/, which `npm ci` empties: a fresh clone, and every CI run, orders files by their size
 * in bytes instead, and a short file that runs for minutes (a chaos run, a worker killed at every
 * step) starts last, with one of the two workers idle beside it until it ends. A file missing here
 * only costs time.
 */
export const longFiles: readonly string[] = [
  'test/chaos.test.ts',
  'test/cli-launcher.test.ts',
  'test/start-cleanup.test.ts',
  'test/cli-commands.test.ts',
  'test/provider-charges.test.ts',
  'test/events-crash.test.ts',
  'test/cli-events.test.ts',
  'test/secrets-masked.test.ts',
  'test/api-webhooks.test.ts',
  'test/api-rate-limits.test.ts',
  'test/startup-waits.test.ts',
  'test/queue-intake.test.ts',
  'test/api-outage.test.ts',
  'test/api-mandates.test.ts',
  'test/mcp-stdio.test.ts',
  'test/provider-reconcile.test.ts',
  'test/hostile-input.test.ts',
  'test/web-ui-codec.test.ts',
  'test/workflow-replay.test.ts',
  'test/api-webhook-endpoints.test.ts',
];

/** Vitest's order, except that without recorded timings the long files above start first. */
export default class LongFilesFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const root = this.ctx.config.root;
    const timed = sorted.every((spec) => this.ctx.cache.getFileTestResults(`${spec.project.name}:${relative(root, spec.moduleId)}`) !== undefined);
    if (timed) return sorted;
    const rank = (spec: TestSpecification): number => {
      const index = longFiles.indexOf(relative(root, spec.moduleId));
      return index === -1 ? longFiles.length : index;
    };
    // Projects stay in the order Vitest gave them; within one, listed files first, the rest as given.
    const projectOrder = [...new Set(sorted.map((spec) => spec.project.name))];
    return sorted
      .map((spec, position) => ({ spec, position }))
      .sort(
        (a, b) =>
          projectOrder.indexOf(a.spec.project.name) - projectOrder.indexOf(b.spec.project.name) ||
          rank(a.spec) - rank(b.spec) ||
          a.position - b.position,
      )
      .map(({ spec }) => spec);
  }
}
