/**
 * How a charge moves its money: at once (`automatic`), or held until a capture (`manual`). The one
 * list: the CaptureMode type (src/domain/charge.ts), the wire schema and the MCP tool's argument
 * derive from it. A module of its own, imported by workflow code as a type only, so that a change
 * to the wire side never changes the workflow bundle.
 */
export const captureModes = ['automatic', 'manual'] as const;
