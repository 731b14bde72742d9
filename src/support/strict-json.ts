import { printParseErrorCode, visit } from 'jsonc-parser';

/**
 * Request bytes to a JSON value, taken exactly as written or refused: every surface that reads a
 * JSON body (the HTTP API, the MCP endpoint, provider webhooks, the payload codec) goes through
 * here, so no body is ever repaired, rounded or collapsed on its way to validation.
 *
 * - The bytes must be UTF-8 as RFC 3629 defines it: no invalid byte, overlong form or encoded
 *   surrogate (a lenient decoder would put U+FFFD in their place and store that), and no byte
 *   order mark (RFC 8259 §8.1).
 * - The text must be RFC 8259 JSON: no comments, no trailing commas, no unescaped control
 *   characters in strings, at most `jsonMaxDepth` arrays and objects nested.
 * - A number must be an integer literal (no fraction, no exponent, not `-0`) within the safe
 *   integer range: its value is read from its digits, never from a rounded double, so
 *   `100.99999999999999999` is refused rather than charged as 101.
 * - A member name may appear once per object (JSON.parse keeps the last silently), and never as
 *   `__proto__`, `constructor` or `prototype`, names that only ever mean mischief in a body.
 *
 * The grammar (tokens, escapes, structure) is jsonc-parser's, with comments and trailing commas
 * off and its error recovery cut short at the first error; the rules above are this module's.
 * Pure: no I/O.
 */

/** How deeply arrays and objects may nest in one body; the deepest legitimate body (an MCP batch of create_charge calls with metadata) needs 5. */
export const jsonMaxDepth = 32;

/** Member names refused in every object: their only use in a request is prototype pollution. */
export const reservedMemberNames: ReadonlySet<string> = new Set(['__proto__', 'constructor', 'prototype']);

/** At most this many characters of a refused number are quoted back. */
const quotedNumberMaxLength = 40;

export type StrictJsonRefusalKind =
  /** The bytes are not UTF-8, or start with a byte order mark. */
  | 'encoding'
  /** The text is not JSON, or nests deeper than the limit. */
  | 'syntax'
  /** The JSON is well formed but a member or number breaks a rule above: `field` names it. */
  | 'member';

/** Why a body was refused: `field` is `body` or the path of the member at fault (`metadata.k`, `items.0`). */
export class StrictJsonError extends Error {
  constructor(
    readonly kind: StrictJsonRefusalKind,
    readonly field: string,
    /** What is wrong, without the field: "appears twice in one object; …". */
    readonly problem: string,
  ) {
    super(`${field}: ${problem}`);
    this.name = 'StrictJsonError';
  }
}

export interface StrictJsonOptions {
  /** Nesting allowed, in arrays and objects; `jsonMaxDepth` unless given. */
  maxDepth?: number;
}

const utf8BomBytes = [0xef, 0xbb, 0xbf] as const;
// fatal: a malformed sequence throws instead of becoming U+FFFD. ignoreBOM: a BOM would otherwise
// be dropped silently; it is refused before decoding instead.
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** The body's bytes as a JSON value, or a StrictJsonError naming `body` or the member at fault. */
export function decodeStrictJson(bytes: Uint8Array, options: StrictJsonOptions = {}): unknown {
  return parseStrictJson(decodeUtf8Strict(bytes), options);
}

/** The bytes as text, if they are UTF-8 without a byte order mark. */
export function decodeUtf8Strict(bytes: Uint8Array): string {
  if (utf8BomBytes.every((byte, i) => bytes[i] === byte)) {
    throw new StrictJsonError('encoding', 'body', 'starts with a byte order mark (EF BB BF): send UTF-8 without one');
  }
  try {
    return utf8.decode(bytes);
  } catch {
    throw new StrictJsonError(
      'encoding',
      'body',
      'is not valid UTF-8 (an invalid byte, an overlong form or an encoded surrogate): nothing in it was read',
    );
  }
}

/** Whether the text is only JSON whitespace (space, tab, line feed, carriage return), i.e. no value at all. */
export function isBlankJsonText(text: string): boolean {
  return /^[ \t\n\r]*$/.test(text);
}

/** JSON text to a value under the rules above. */
export function parseStrictJson(text: string, options: StrictJsonOptions = {}): unknown {
  const maxDepth = options.maxDepth ?? jsonMaxDepth;
  const builder = new ValueBuilder(text, maxDepth);
  visit(
    text,
    {
      onObjectBegin: (offset) => builder.begin({}, offset),
      onArrayBegin: (offset) => builder.begin([], offset),
      onObjectEnd: () => builder.end(),
      onArrayEnd: () => builder.end(),
      onObjectProperty: (name) => builder.name(name),
      onLiteralValue: (value: unknown, offset, length) => builder.literal(value, offset, length),
      // The parser would recover and go on; the first error ends the parse.
      onError: (code, offset) => {
        throw new StrictJsonError('syntax', 'body', `is not valid JSON: ${syntaxProblems[printParseErrorCode(code)] ?? 'unexpected input'} at ${lineAndColumn(text, offset)}`);
      },
    },
    { disallowComments: true, allowTrailingComma: false, allowEmptyContent: false },
  );
  if (!builder.done) throw new StrictJsonError('syntax', 'body', 'is not valid JSON: no value');
  return builder.result;
}

interface ObjectFrame {
  container: Record<string, unknown>;
  path: readonly (string | number)[];
  /** The member whose value comes next. */
  name: string | undefined;
}
interface ArrayFrame {
  container: unknown[];
  path: readonly (string | number)[];
}
type Frame = ObjectFrame | ArrayFrame;

/** Builds the value from the parser's events, checking each member name and number as it arrives. */
class ValueBuilder {
  private readonly stack: Frame[] = [];
  result: unknown = undefined;
  done = false;

  constructor(
    private readonly text: string,
    private readonly maxDepth: number,
  ) {}

  begin(container: Record<string, unknown> | unknown[], offset: number): void {
    // Checked as each level opens, so a deeply nested body is refused before the parser's own
    // recursion gets anywhere near the stack's limit.
    if (this.stack.length >= this.maxDepth) {
      throw new StrictJsonError(
        'syntax',
        'body',
        `nests arrays and objects deeper than ${this.maxDepth} levels (jsonMaxDepth) at ${lineAndColumn(this.text, offset)}`,
      );
    }
    const path = this.nextPath();
    this.stack.push(Array.isArray(container) ? { container, path } : { container, path, name: undefined });
  }

  end(): void {
    const frame = this.stack.pop()!;
    this.place(frame.container);
  }

  name(name: string): void {
    const frame = this.stack.at(-1) as ObjectFrame;
    const field = pathText([...frame.path, name]);
    if (reservedMemberNames.has(name)) {
      throw new StrictJsonError(
        'member',
        field,
        `is not a known field: "${name}" is refused as a member name in every object (__proto__, constructor, prototype)`,
      );
    }
    if (Object.hasOwn(frame.container, name)) {
      throw new StrictJsonError('member', field, `appears more than once in its object: each member name may appear once`);
    }
    frame.name = name;
  }

  literal(value: unknown, offset: number, length: number): void {
    if (typeof value === 'number') {
      this.place(integerOf(this.text.slice(offset, offset + length), () => pathText(this.nextPath())));
    } else {
      this.place(value);
    }
  }

  /** The path of the value about to be placed in the innermost open container. */
  private nextPath(): readonly (string | number)[] {
    const frame = this.stack.at(-1);
    if (frame === undefined) return [];
    return Array.isArray(frame.container) ? [...frame.path, frame.container.length] : [...frame.path, (frame as ObjectFrame).name!];
  }

  private place(value: unknown): void {
    const frame = this.stack.at(-1);
    if (frame === undefined) {
      this.result = value;
      this.done = true;
    } else if (Array.isArray(frame.container)) {
      frame.container.push(value);
    } else {
      // Safe as plain assignment: reserved names never get here.
      const object = frame as ObjectFrame;
      object.container[object.name!] = value;
      object.name = undefined;
    }
  }
}

/** Dotted, as validation errors name fields (`metadata.k`, `payloads.0.data`); the top level is `body`. */
function pathText(path: readonly (string | number)[]): string {
  return path.map(String).join('.') || 'body';
}

const integerLiteral = /^-?(?:0|[1-9][0-9]*)$/;

/** A number token's value, read from its text: an integer literal within the safe range, or refused. */
function integerOf(literal: string, field: () => string): number {
  const quoted = literal.length > quotedNumberMaxLength ? `${literal.slice(0, quotedNumberMaxLength)}…` : literal;
  if (!integerLiteral.test(literal)) {
    throw new StrictJsonError(
      'member',
      field(),
      `must be an integer written as one, without a fraction or exponent (received ${quoted}): numbers are never rounded`,
    );
  }
  if (literal === '-0') throw new StrictJsonError('member', field(), 'is -0: write 0');
  // 16 digits hold every safe integer; a longer literal is not one, and is not handed to Number().
  const value = literal.replace('-', '').length <= 16 ? Number(literal) : Number.NaN;
  if (!Number.isSafeInteger(value)) {
    throw new StrictJsonError(
      'member',
      field(),
      `is beyond the safe integer range, ±${Number.MAX_SAFE_INTEGER} (received ${quoted})`,
    );
  }
  return value;
}

/** 1-based, as editors count. */
function lineAndColumn(text: string, offset: number): string {
  let line = 1;
  let lineStart = 0;
  for (let i = text.indexOf('\n'); i !== -1 && i < offset; i = text.indexOf('\n', i + 1)) {
    line += 1;
    lineStart = i + 1;
  }
  return `line ${line}, column ${offset - lineStart + 1}`;
}

/** jsonc-parser's error codes in words. The comment errors cannot occur with comments disallowed. */
const syntaxProblems: Partial<Record<ReturnType<typeof printParseErrorCode>, string>> = {
  InvalidSymbol: 'an unexpected character or word',
  InvalidNumberFormat: 'an invalid number',
  PropertyNameExpected: 'a member name (a string in double quotes) expected',
  ValueExpected: 'a value expected',
  ColonExpected: 'a colon expected',
  CommaExpected: 'a comma expected',
  CloseBraceExpected: 'a closing brace expected',
  CloseBracketExpected: 'a closing bracket expected',
  EndOfFileExpected: 'nothing more expected after the value',
  InvalidCommentToken: 'a comment, which JSON does not allow',
  UnexpectedEndOfComment: 'an unterminated comment',
  UnexpectedEndOfString: 'an unterminated string (or a line break in one)',
  UnexpectedEndOfNumber: 'a number cut short',
  InvalidUnicode: 'an invalid \\u escape',
  InvalidEscapeCharacter: 'an invalid escape',
  InvalidCharacter: 'a control character, which must be escaped in a string',
};
