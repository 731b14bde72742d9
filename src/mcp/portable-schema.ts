import { z } from 'zod';

/**
 * Tool schemas every MCP client can read. Clients differ in how much JSON Schema they understand:
 * many (and the MCP Inspector's --strict check) accept only plain schemas, with one `type` per node,
 * `type: "object"` at the root, and none of `$ref`/`$defs`, `anyOf`/`oneOf`/`allOf`, `const`,
 * `type` arrays (`["string", "null"]`), `propertyNames`, `format` or `pattern`. The wire schemas
 * (src/service/wire.ts) use those freely for the OpenAPI document, so the tools' output schemas are
 * derived from them here, one rule per construct:
 *
 * - nullable: the member is optional instead, and a tool result leaves a null member out
 *   ({@link withoutNulls}), so "absent" is how MCP says what HTTP says with null;
 * - a literal: an enum of its one value;
 * - a record: an object whose `additionalProperties` is the value's schema (or `true` for any value);
 * - a string's format and refinements: dropped (the text says what a value looks like).
 *
 * What the derived schema accepts is checked on every result by the SDK before it is sent.
 */
export function portableSchema(schema: z.ZodType): z.ZodType {
  const derived = derive(schema);
  const description = schema.description;
  return description === undefined ? derived : derived.describe(description);
}

/** Zod's definition of a schema: its kind and the parts it was made of (zod v4's `_zod.def`). */
interface Definition {
  type: string;
  innerType?: z.ZodType;
  shape?: Record<string, z.ZodType>;
  values?: unknown[];
  valueType?: z.ZodType;
  element?: z.ZodType;
  entries?: Record<string, string | number>;
  out?: z.ZodType;
}

/** {@link portableSchema} of an object schema, typed as one (what a tool's schema must be). */
export function portableObject(schema: z.ZodObject): z.ZodObject {
  return portableSchema(schema) as z.ZodObject;
}

function definitionOf(schema: z.ZodType): Definition {
  return (schema as unknown as { _zod: { def: Definition } })._zod.def;
}

function derive(schema: z.ZodType): z.ZodType {
  const def = definitionOf(schema);
  switch (def.type) {
    case 'object':
      return z.object(Object.fromEntries(Object.entries(def.shape!).map(([name, member]) => [name, portableSchema(member)])));
    case 'nullable':
    case 'optional':
      return portableSchema(def.innerType!).optional();
    case 'literal': {
      const values = def.values!;
      if (!values.every((value): value is string => typeof value === 'string')) throw new Error('portableSchema: only string literals are supported');
      return z.enum(values as [string, ...string[]]);
    }
    case 'enum':
      return z.enum(Object.values(def.entries!).map(String) as [string, ...string[]]);
    case 'record': {
      const values = definitionOf(def.valueType!);
      // Any value: `additionalProperties: true`, not the empty schema zod writes for unknown.
      if (values.type === 'unknown' || values.type === 'any') return z.object({}).catchall(z.unknown()).meta({ additionalProperties: true });
      return z.object({}).catchall(portableSchema(def.valueType!));
    }
    case 'array':
      return z.array(portableSchema(def.element!));
    case 'string':
      return z.string();
    case 'number':
      return isInteger(schema) ? z.number().int() : z.number();
    case 'boolean':
      return z.boolean();
    case 'pipe':
      // A preprocessing step (e.g. refusingPrototypeKey): what comes out is the schema it feeds.
      return portableSchema(def.out!);
    default:
      throw new Error(`portableSchema: no portable form for a zod ${def.type}`);
  }
}

function isInteger(schema: z.ZodType): boolean {
  return (schema as unknown as { format?: string | null }).format === 'safeint' || (schema as unknown as { isInt?: boolean }).isInt === true;
}

/**
 * A result's structured content as its portable output schema describes it: every member whose value
 * is null left out, at any depth (arrays keep their elements; a null element is left as it is).
 */
export function withoutNulls<T>(value: T): T {
  if (Array.isArray(value)) return value.map((element: unknown) => withoutNulls(element)) as T;
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([, member]) => member !== null)
      .map(([name, member]) => [name, withoutNulls(member)]),
  ) as T;
}
