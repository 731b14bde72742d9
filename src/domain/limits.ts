/**
 * Every bound the service enforces, in one place, each named with its unit.
 * Pure constants: imported by workflow code, so no Node or I/O imports here.
 */
export const limits = {
  /** Smallest chargeable amount, in the currency's minor unit. */
  amountMinorMin: 1,
  /** Largest chargeable amount by default (10^12 minor units); `CHARGE_AMOUNT_MINOR_MAX` overrides it. */
  amountMinorMaxDefault: 1_000_000_000_000,
  idempotencyKeyMaxLength: 255,
  tenantIdPattern: /^[a-z0-9_-]{1,64}$/,
  accountIdPattern: /^[A-Za-z0-9_.:-]{1,64}$/,
  accountIdMaxLength: 64,
  /** Text lengths are counted in Unicode code points (characters), as JSON Schema's maxLength counts them. */
  orderIdMaxLength: 255,
  descriptionMaxLength: 1_000,
  metadataMaxKeys: 50,
  metadataKeyMaxLength: 40,
  metadataValueMaxLength: 500,
  apiKeyLabelMaxLength: 200,
  /** Page size of a charge listing. */
  listLimitMin: 1,
  listLimitMax: 100,
  listLimitDefault: 20,
  /**
   * How long an issued idempotency token may wait for its first use (and the longest a caller may
   * ask for): a form is rendered and submitted within minutes. Once used, the token is its charge's
   * key and never expires.
   */
  idempotencyTokenTtlMs: 15 * 60_000,
  /** The shortest lifetime a caller may ask for. */
  idempotencyTokenTtlMinMs: 1_000,
  /** Expired, never-used tokens of a tenant deleted each time it is issued a new one. */
  idempotencyTokenPurgeBatch: 100,
} as const;

/** Idempotency key: 1–255 visible ASCII characters (0x21–0x7E), reused verbatim on every retry. */
export const idempotencyKeyPattern = /^[\x21-\x7e]{1,255}$/;

/** ISO 4217 alphabetic code, upper case. */
export const currencyPattern = /^[A-Z]{3}$/;

/**
 * The contract's text rules as patterns. Written with explicit ranges rather than `\p{Cc}` so the
 * same source works as a JavaScript regex and as a JSON Schema `pattern` that non-JavaScript
 * schema tools (Python's `re`) understand. `\p{Cc}` is exactly U+0000–U+001F and U+007F–U+009F.
 * Lone surrogates cannot be written as a portable pattern; the validator checks them separately.
 */
const singleLineForbidden = '\\u0000-\\u001f\\u007f-\\u009f';
/**
 * A description may hold tab, line feed and carriage return: browsers submit a textarea's line
 * breaks as CRLF, so refusing CR would refuse ordinary multi-line text.
 */
const multiLineForbidden = '\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f';

export const textPatterns = {
  /** Character-class bodies of what each kind of text must not contain. */
  singleLineForbidden,
  multiLineForbidden,
  /** One line of text: no control character at all. */
  singleLine: `^[^${singleLineForbidden}]*$`,
  multiLine: `^[^${multiLineForbidden}]*$`,
} as const;
