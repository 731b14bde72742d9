import { isUtf8 } from 'node:buffer';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  decodeStrictJson,
  isBlankJsonText,
  jsonMaxDepth,
  parseStrictJson,
  reservedMemberNames,
  StrictJsonError,
  type StrictJsonRefusalKind,
} from '../src/support/strict-json.js';

/**
 * The strict JSON decoder on its own: what it refuses (and how it names the field), and, by
 * property, that whatever it accepts JSON.parse reads to the same value, and whatever valid JSON
 * it is given within its rules it reads as JSON.parse does.
 */

function refusalOf(run: () => unknown): StrictJsonError {
  try {
    run();
  } catch (error) {
    if (error instanceof StrictJsonError) return error;
    throw error;
  }
  throw new Error('accepted');
}

const bytes = (...parts: Array<string | number[]>): Uint8Array =>
  Buffer.concat(parts.map((part) => (typeof part === 'string' ? Buffer.from(part, 'utf8') : Buffer.from(part))));

describe('refusals: each names its field', () => {
  const cases: Array<[label: string, text: string, kind: StrictJsonRefusalKind, field: string, problem: RegExp]> = [
    ['fraction that rounds up', '{"amount": 100.99999999999999999}', 'member', 'amount', /integer .* without a fraction or exponent .*100\.99999999999999999/],
    ['fraction that rounds to 1', '{"amount": 0.99999999999999999999}', 'member', 'amount', /without a fraction/],
    ['fraction that rounds to 10^12', '{"amount": 999999999999.99999}', 'member', 'amount', /without a fraction/],
    ['integral fraction', '{"amount": 100.0}', 'member', 'amount', /without a fraction/],
    ['exponent', '{"amount": 1e2}', 'member', 'amount', /or exponent .*1e2/],
    ['negative exponent', '{"amount": 100E-0}', 'member', 'amount', /or exponent/],
    ['negative zero', '{"amount": -0}', 'member', 'amount', /-0/],
    ['just beyond the safe range', '{"amount": 9007199254740992}', 'member', 'amount', /safe integer range/],
    ['far beyond, negative', '{"amount": -123456789012345678901234567890}', 'member', 'amount', /safe integer range/],
    ['a number in metadata', '{"metadata": {"k": 1.5}}', 'member', 'metadata.k', /without a fraction/],
    ['a number in an array', '{"payloads": [1, 2.5]}', 'member', 'payloads.1', /without a fraction/],
    ['a top-level number', '1.5', 'member', 'body', /without a fraction/],
    ['duplicate amount', '{"amount": 100, "amount": 200}', 'member', 'amount', /more than once/],
    ['duplicate in metadata', '{"metadata": {"k": "a", "k": "b"}}', 'member', 'metadata.k', /more than once/],
    ['duplicate with the same value', '{"a": 1, "a": 1}', 'member', 'a', /more than once/],
    ['duplicate written with an escape', '{"a": 1, "\\u0061": 2}', 'member', 'a', /more than once/],
    ['duplicate in an array element', '[{"x": 1}, {"x": 1, "x": 2}]', 'member', '1.x', /more than once/],
    ['__proto__', '{"__proto__": {"admin": true}}', 'member', '__proto__', /"__proto__" is refused/],
    ['constructor', '{"constructor": {"prototype": {}}}', 'member', 'constructor', /not a known field: "constructor"/],
    ['prototype', '{"prototype": 1}', 'member', 'prototype', /not a known field: "prototype"/],
    ['__proto__ in metadata', '{"metadata": {"__proto__": "x"}}', 'member', 'metadata.__proto__', /"__proto__"/],
    ['__proto__ escaped', '{"\\u005f_proto__": 1}', 'member', '__proto__', /"__proto__"/],
    ['constructor in metadata', '{"metadata": {"constructor": "x"}}', 'member', 'metadata.constructor', /"constructor"/],
    ['prototype in metadata', '{"metadata": {"prototype": "x"}}', 'member', 'metadata.prototype', /"prototype"/],
    ['trailing comma', '{"a": 1,}', 'syntax', 'body', /not valid JSON: a member name .* line 1, column 9/],
    ['comment', '{"a": 1 /* c */}', 'syntax', 'body', /comment/],
    ['single quotes', "{'a': 1}", 'syntax', 'body', /not valid JSON/],
    ['unescaped control character', '{"a": "x\u0001y"}', 'syntax', 'body', /control character/],
    ['line break in a string', '{"a": "x\ny"}', 'syntax', 'body', /unterminated string/],
    ['bad escape', '{"a": "\\x41"}', 'syntax', 'body', /invalid escape/],
    ['short \\u escape', '{"a": "\\u12"}', 'syntax', 'body', /\\u escape/],
    ['leading zero', '{"a": 01}', 'syntax', 'body', /comma expected/],
    ['plus sign', '{"a": +1}', 'syntax', 'body', /not valid JSON/],
    ['NaN', '{"a": NaN}', 'syntax', 'body', /not valid JSON/],
    ['two values', '{} {}', 'syntax', 'body', /nothing more expected/],
    ['unclosed', '{"a": [1, 2', 'syntax', 'body', /closing bracket expected .* line 1, column 12/],
    ['position on a later line', '{\n  "a": 1,\n  "b" 2\n}', 'syntax', 'body', /colon expected at line 3, column 7/],
    ['empty', '', 'syntax', 'body', /a value expected/],
    ['non-breaking space is not JSON whitespace', '{"a":\u00a01}', 'syntax', 'body', /not valid JSON/],
    ['too deep', `${'['.repeat(jsonMaxDepth + 1)}${']'.repeat(jsonMaxDepth + 1)}`, 'syntax', 'body', new RegExp(`deeper than ${jsonMaxDepth} levels \\(jsonMaxDepth\\)`)],
  ];
  it.each(cases)('%s', (_label, text, kind, field, problem) => {
    const refused = refusalOf(() => parseStrictJson(text));
    expect({ kind: refused.kind, field: refused.field }).toEqual({ kind, field });
    expect(refused.problem).toMatch(problem);
    expect(refused.message).toBe(`${field}: ${refused.problem}`);
  });

  it('bytes that are not UTF-8, or a byte order mark, are refused before any parsing', () => {
    const broken: Array<[string, Uint8Array]> = [
      ['encoded surrogate ED A0 80', bytes('{"order_id": "a', [0xed, 0xa0, 0x80], '"}')],
      ['FF', bytes('{"order_id": "a', [0xff], '"}')],
      ['overlong C0 AF', bytes('{"order_id": "a', [0xc0, 0xaf], '"}')],
      ['truncated sequence', bytes('{"order_id": "', [0xe2, 0x82], '"}')],
      ['overlong NUL C0 80', bytes('{"order_id": "', [0xc0, 0x80], '"}')],
      ['beyond U+10FFFF', bytes('{"order_id": "', [0xf4, 0x90, 0x80, 0x80], '"}')],
      ['invalid byte outside a string', bytes('{"a": 1}', [0x80])],
    ];
    for (const [label, body] of broken) {
      const refused = refusalOf(() => decodeStrictJson(body));
      expect({ label, kind: refused.kind, field: refused.field }).toEqual({ label, kind: 'encoding', field: 'body' });
      expect(refused.problem, label).toMatch(/not valid UTF-8/);
    }
    const bom = refusalOf(() => decodeStrictJson(bytes([0xef, 0xbb, 0xbf], '{"a": 1}')));
    expect({ kind: bom.kind, field: bom.field }).toEqual({ kind: 'encoding', field: 'body' });
    expect(bom.problem).toMatch(/byte order mark/);
  });

  it('the same characters sent as UTF-8 are read exactly: U+FEFF inside a string is text, not a BOM', () => {
    const text = '{"order_id": "é日😀\ufeff\u{10ffff}\u007f\u0085", "n": -9007199254740991, "z": 0, "m": {"k": [true, false, null]}}';
    expect(decodeStrictJson(Buffer.from(text, 'utf8'))).toEqual(JSON.parse(text));
    // Escapes are read as JSON.parse reads them, a lone surrogate escape included: it is text
    // validation's to refuse, naming its field.
    expect(parseStrictJson('["\\ud800", "\\ud83d\\ude00", "\\u0000", "\\/"]')).toEqual(['\ud800', '😀', '\u0000', '/']);
  });

  it('nesting up to jsonMaxDepth is read; far deeper is refused without exhausting the stack', () => {
    const nested = (depth: number) => `${'{"a":['.repeat(depth / 2)}1${']}'.repeat(depth / 2)}`;
    expect(parseStrictJson(nested(jsonMaxDepth))).toEqual(JSON.parse(nested(jsonMaxDepth)));
    expect(refusalOf(() => parseStrictJson(nested(jsonMaxDepth + 2))).problem).toMatch(/deeper than/);
    expect(refusalOf(() => parseStrictJson('['.repeat(1_000_000))).problem).toMatch(/deeper than/);
    expect(parseStrictJson('[[1]]', { maxDepth: 2 })).toEqual([[1]]);
    expect(refusalOf(() => parseStrictJson('[[[1]]]', { maxDepth: 2 })).problem).toMatch(/deeper than 2 levels/);
  });

  it('blank text is recognised by JSON whitespace only', () => {
    expect(isBlankJsonText(' \t\r\n')).toBe(true);
    expect(isBlankJsonText('')).toBe(true);
    expect(isBlankJsonText('\u00a0')).toBe(false);
    expect(isBlankJsonText('\ufeff')).toBe(false);
  });

  it('objects are plain: no prototype is touched', () => {
    const value = parseStrictJson('{"a": {"b": 1}}') as Record<string, unknown>;
    expect(Object.getPrototypeOf(value)).toBe(Object.prototype);
    expect(({} as Record<string, unknown>).b).toBeUndefined();
  });
});

// ---- properties ---------------------------------------------------------------------------------

/** Any UTF-16 code unit: lone surrogates, controls and quotes included, which JSON.stringify escapes. */
const anyText = fc.string({ unit: fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)), maxLength: 12 });
const memberName = fc.oneof(anyText, fc.constantFrom('a', 'amount', 'metadata', '', 'Constructor', '__proto', 'proto')).filter((name) => !reservedMemberNames.has(name));
const safeInteger = fc.oneof(fc.integer(), fc.maxSafeInteger(), fc.constantFrom(0, Number.MAX_SAFE_INTEGER, Number.MIN_SAFE_INTEGER)).filter((n) => !Object.is(n, -0));

/** JSON values within the rules: safe integers, any text, no duplicate or reserved names, depth bounded by the tie. */
const { value: allowedValue } = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    safeInteger,
    anyText,
    fc.boolean(),
    fc.constant(null),
    fc.array(tie('value'), { maxLength: 5 }),
    fc.dictionary(memberName, tie('value'), { maxKeys: 5 }).map((entries) => entries as unknown),
  ),
}));

/** Whitespace JSON allows between tokens, and some it does not. */
const indent = fc.constantFrom<string | number | undefined>(undefined, 0, 1, 2, '\t', '\r\n', ' \t\n');

describe('properties: the strict decoder agrees with JSON.parse wherever it accepts', () => {
  it('any value within the rules, however laid out, is read as JSON.parse reads it', () => {
    fc.assert(
      fc.property(allowedValue, indent, (value, space) => {
        const text = JSON.stringify(value, null, space);
        expect(parseStrictJson(text)).toEqual(JSON.parse(text));
        expect(decodeStrictJson(Buffer.from(text, 'utf8'))).toEqual(JSON.parse(Buffer.from(text, 'utf8').toString()));
      }),
      { numRuns: 2_000 },
    );
  });

  /** Text made of JSON's own characters, so that most of it is nearly JSON. */
  const nearlyJson = fc.oneof(
    fc.string({ unit: fc.constantFrom(...'{}[]",:0123456789.eE+- \t\n\r\\/utrfalsn\u00a0\u2028\u0000\u0001'.split('')), maxLength: 30 }),
    fc
      .tuple(allowedValue, fc.nat(), fc.constantFrom('', ',', ']', '}', '"', '.', 'e', '0', '-', ' ', '\\', ':', '1.5', '/*', '\u0001', '\u00a0'), fc.nat({ max: 2 }))
      .map(([value, at, insert, remove]) => {
        const text = JSON.stringify(value);
        const i = at % (text.length + 1);
        return text.slice(0, i) + insert + text.slice(i + remove);
      }),
  );

  it('any text: accepted only if JSON.parse accepts it and reads the same value; refused only with a StrictJsonError', () => {
    fc.assert(
      fc.property(nearlyJson, (text) => {
        let strict: unknown;
        try {
          strict = parseStrictJson(text);
        } catch (error) {
          expect(error).toBeInstanceOf(StrictJsonError);
          return;
        }
        expect(strict).toEqual(JSON.parse(text));
      }),
      { numRuns: 5_000 },
    );
  });

  it('any text JSON.parse refuses, the strict decoder refuses too', () => {
    fc.assert(
      fc.property(nearlyJson, (text) => {
        let standard = true;
        try {
          JSON.parse(text);
        } catch {
          standard = false;
        }
        fc.pre(!standard);
        // A member error may come first (a fraction before the syntax error): refused either way.
        expect(refusalOf(() => parseStrictJson(text))).toBeInstanceOf(StrictJsonError);
      }),
      { numRuns: 3_000 },
    );
  });

  it('a number is accepted exactly when it is a safe integer literal, and its value is read from its digits', () => {
    const numberText = fc.oneof(
      fc.double({ noNaN: true, noDefaultInfinity: true }).map((d) => JSON.stringify(d)),
      fc.bigInt({ min: -(2n ** 60n), max: 2n ** 60n }).map(String),
      fc.tuple(fc.stringMatching(/^-?(0|[1-9][0-9]{0,20})$/), fc.constantFrom('', '.0', '.5', '.99999999999999999', 'e0', 'E+2', 'e-1')).map(([a, b]) => a + b),
    );
    fc.assert(
      fc.property(numberText, (literal) => {
        const isSafeIntegerLiteral = /^-?(0|[1-9][0-9]*)$/.test(literal) && literal !== '-0' && BigInt(literal) >= BigInt(Number.MIN_SAFE_INTEGER) && BigInt(literal) <= BigInt(Number.MAX_SAFE_INTEGER);
        const text = `{"amount": ${literal}}`;
        if (isSafeIntegerLiteral) {
          expect(parseStrictJson(text)).toEqual({ amount: Number(BigInt(literal)) });
        } else {
          const refused = refusalOf(() => parseStrictJson(text));
          expect({ kind: refused.kind, field: refused.field }).toEqual({ kind: 'member', field: 'amount' });
        }
      }),
      { numRuns: 3_000 },
    );
  });

  it('a member name repeated anywhere is refused, naming its path', () => {
    fc.assert(
      fc.property(fc.dictionary(memberName, safeInteger, { minKeys: 1, maxKeys: 6 }), fc.nat(), fc.array(memberName.filter((n) => n !== ''), { maxLength: 3 }), (object, pick, outer) => {
        const names = Object.keys(object);
        const repeated = names[pick % names.length]!;
        const members = [...names.map((n) => `${JSON.stringify(n)}: ${object[n]}`), `${JSON.stringify(repeated)}: 1`];
        // Wrapped in distinct outer members, so the path has depth.
        const text = outer.reduceRight((inner, name) => `{${JSON.stringify(name)}: ${inner}}`, `{${members.join(', ')}}`);
        const refused = refusalOf(() => parseStrictJson(text));
        expect(refused.field).toBe([...outer, repeated].join('.') || 'body');
        expect(refused.problem).toMatch(/more than once/);
      }),
      { numRuns: 1_000 },
    );
  });

  it('any bytes: either valid UTF-8 read as JSON.parse reads it, or a StrictJsonError', () => {
    const jsonish = allowedValue.map((value) => Buffer.from(JSON.stringify(value), 'utf8'));
    const anyBytes = fc.oneof(
      fc.uint8Array({ maxLength: 24 }),
      fc.tuple(jsonish, fc.nat(), fc.uint8Array({ minLength: 1, maxLength: 4 })).map(([body, at, inserted]) => {
        const i = at % (body.length + 1);
        return Buffer.concat([body.subarray(0, i), inserted, body.subarray(i)]);
      }),
    );
    fc.assert(
      fc.property(anyBytes, (body) => {
        let value: unknown;
        try {
          value = decodeStrictJson(body);
        } catch (error) {
          expect(error).toBeInstanceOf(StrictJsonError);
          if (!isUtf8(body)) expect((error as StrictJsonError).kind).toBe('encoding');
          return;
        }
        expect(isUtf8(body)).toBe(true);
        expect(value).toEqual(JSON.parse(Buffer.from(body).toString('utf8')));
      }),
      { numRuns: 3_000 },
    );
  });
});
