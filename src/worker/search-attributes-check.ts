import type { NativeConnection } from '@temporalio/worker';
import { chargeSearchAttributeKeys } from '../../workflows/search-attributes.js';
import { indexedValueTypeByKind, searchAttributeKindOf, type SearchAttributeKind } from '../support/search-attribute-kinds.js';

/**
 * Custom search attributes for charges, name -> kind: derived from the keys the workflow and the
 * service set (workflows/search-attributes.ts), so there is one list. The worker checks them here; the
 * local stack registers them, handed this list by src/runtime/local-stack.ts.
 */
export const chargeSearchAttributes: Readonly<Record<string, SearchAttributeKind>> = Object.fromEntries(
  Object.values(chargeSearchAttributeKeys).map((key) => [key.name, searchAttributeKindOf[key.type]]),
);

/** Thrown when the namespace lacks a search attribute the charges set, or has it with another type. */
export class SearchAttributesMissingError extends Error {
  override readonly name = 'SearchAttributesMissingError';
  constructor(
    readonly namespace: string,
    /** Attribute name to the type it needs, for each one missing or of the wrong type. */
    readonly problems: ReadonlyArray<{ name: string; kind: SearchAttributeKind; found: string | null }>,
  ) {
    const lines = problems.map((p) =>
      p.found === null ? `  ${p.name} (missing)` : `  ${p.name} (registered as ${p.found}, needs ${p.kind})`,
    );
    const commands = problems.map(
      (p) => `  temporal operator search-attribute create --namespace ${namespace} --name ${p.name} --type ${p.kind}`,
    );
    const wrongType = problems.some((p) => p.found !== null);
    super(
      `namespace ${namespace} lacks the search attributes charges are started and indexed with, ` +
        `so Temporal would refuse every charge's start:\n${lines.join('\n')}\n` +
        (wrongType ? 'Delete the ones of the wrong type first (temporal operator search-attribute remove), then register them:\n' : 'Register them, then start the worker again:\n') +
        commands.join('\n'),
    );
  }
}

const kindByIndexedValueType = new Map<number, SearchAttributeKind>(
  Object.entries(indexedValueTypeByKind).map(([kind, type]) => [type, kind as SearchAttributeKind]),
);

/**
 * Refuses to go on unless the namespace has every charge search attribute with its type. The dev
 * server the stack starts registers them itself; an external Temporal needs an operator to.
 */
export async function assertChargeSearchAttributes(connection: NativeConnection, namespace: string): Promise<void> {
  const { customAttributes } = await connection.operatorService.listSearchAttributes({ namespace });
  const custom = customAttributes ?? {};
  const problems: Array<{ name: string; kind: SearchAttributeKind; found: string | null }> = [];
  for (const [name, kind] of Object.entries(chargeSearchAttributes)) {
    const actual = custom[name];
    if (actual === undefined || actual === null) problems.push({ name, kind, found: null });
    else if (Number(actual) !== indexedValueTypeByKind[kind]) {
      problems.push({ name, kind, found: kindByIndexedValueType.get(Number(actual)) ?? `type ${String(actual)}` });
    }
  }
  if (problems.length > 0) throw new SearchAttributesMissingError(namespace, problems);
}
