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
  orderIdMaxLength: 255,
  descriptionMaxLength: 1_000,
  metadataMaxKeys: 50,
  metadataKeyMaxLength: 40,
  metadataValueMaxLength: 500,
} as const;

/** Idempotency key: 1–255 visible ASCII characters (0x21–0x7E), reused verbatim on every retry. */
export const idempotencyKeyPattern = /^[\x21-\x7e]{1,255}$/;

/** ISO 4217 alphabetic code, upper case. */
export const currencyPattern = /^[A-Z]{3}$/;
