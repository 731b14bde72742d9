-- Up Migration

-- Accounts carry running balances so the no-overdraft check is one row lock, not a sum.
-- posted = settled money; pending = held by TRIED charges; available = posted - pending.
CREATE TABLE accounts (
  tenant          text        NOT NULL,
  id              text        NOT NULL,
  currency        char(3)     NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
  allow_overdraft boolean     NOT NULL DEFAULT false,
  frozen          boolean     NOT NULL DEFAULT false,
  -- System accounts stand for money outside the ledger (deposits come from them).
  is_system       boolean     NOT NULL DEFAULT false,
  posted_minor    bigint      NOT NULL DEFAULT 0,
  pending_minor   bigint      NOT NULL DEFAULT 0 CHECK (pending_minor >= 0),
  created_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant, id),
  -- The no-overdraft rule as a database invariant: no code path can break it.
  CONSTRAINT accounts_available_non_negative
    CHECK (allow_overdraft OR posted_minor - pending_minor >= 0)
);

-- One row per (tenant, idempotency key), forever: the last line of defence once Temporal has
-- forgotten a workflow id. hold_state follows the truth table of the contract, section 5.
CREATE TABLE charges (
  tenant             text        NOT NULL,
  idempotency_key    text        NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
  id                 text        NOT NULL UNIQUE,
  fingerprint        text        NOT NULL CHECK (fingerprint ~ '^[0-9a-f]{64}$'),
  order_id           text        NOT NULL,
  payer_account_id   text        NOT NULL,
  payee_account_id   text        NOT NULL,
  currency           char(3)     NOT NULL,
  amount_minor       bigint      NOT NULL CHECK (amount_minor > 0),
  capture_mode       text        NOT NULL CHECK (capture_mode IN ('automatic', 'manual')),
  description        text,
  metadata           jsonb,
  hold_state         text        NOT NULL CHECK (hold_state IN ('DECLINED', 'TRIED', 'CONFIRMED', 'CANCELLED')),
  held_minor         bigint      NOT NULL DEFAULT 0,
  captured_minor     bigint      NOT NULL DEFAULT 0,
  refunded_minor     bigint      NOT NULL DEFAULT 0,
  decline_code       text,
  failure_reason     text,
  hold_expires_at    timestamptz,
  created_at         timestamptz NOT NULL DEFAULT now(),
  updated_at         timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant, idempotency_key),
  CONSTRAINT charges_held_only_while_tried
    CHECK ((hold_state = 'TRIED' AND held_minor = amount_minor) OR (hold_state <> 'TRIED' AND held_minor = 0)),
  CONSTRAINT charges_captured_only_when_confirmed
    CHECK ((hold_state = 'CONFIRMED' AND captured_minor BETWEEN 1 AND amount_minor)
        OR (hold_state <> 'CONFIRMED' AND captured_minor = 0)),
  CONSTRAINT charges_refunds_within_capture CHECK (refunded_minor BETWEEN 0 AND captured_minor),
  CONSTRAINT charges_declined_has_code CHECK ((hold_state = 'DECLINED') = (decline_code IS NOT NULL))
);
CREATE INDEX charges_by_order ON charges (tenant, order_id);
CREATE INDEX charges_by_payer ON charges (tenant, payer_account_id, created_at);
CREATE INDEX charges_open_holds ON charges (hold_expires_at) WHERE hold_state = 'TRIED';

-- The journal: every posted movement is one transfer whose entries sum to zero.
-- Entries are signed: negative debits the account, positive credits it.
CREATE TABLE transfers (
  id           bigserial   PRIMARY KEY,
  tenant       text        NOT NULL,
  kind         text        NOT NULL CHECK (kind IN ('capture', 'refund', 'deposit')),
  -- What the transfer settles: the charge key, the refund key, the deposit key.
  reference    text        NOT NULL,
  currency     char(3)     NOT NULL,
  amount_minor bigint      NOT NULL CHECK (amount_minor > 0),
  created_at   timestamptz NOT NULL DEFAULT now(),
  -- One transfer per business event, however often the step runs.
  UNIQUE (tenant, kind, reference)
);

CREATE TABLE journal_entries (
  id           bigserial   PRIMARY KEY,
  transfer_id  bigint      NOT NULL REFERENCES transfers (id),
  tenant       text        NOT NULL,
  account_id   text        NOT NULL,
  amount_minor bigint      NOT NULL CHECK (amount_minor <> 0),
  created_at   timestamptz NOT NULL DEFAULT now(),
  FOREIGN KEY (tenant, account_id) REFERENCES accounts (tenant, id)
);
CREATE INDEX journal_entries_by_transfer ON journal_entries (transfer_id);
CREATE INDEX journal_entries_by_account ON journal_entries (tenant, account_id);

-- Corrections are new entries: the journal refuses updates and deletes.
CREATE FUNCTION ledger_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP USING ERRCODE = 'CGJ01';
END $$;
CREATE TRIGGER transfers_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON transfers
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER journal_entries_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON journal_entries
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();

-- A transfer whose entries do not sum to zero cannot commit.
CREATE FUNCTION ledger_check_transfer_balanced() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_sum bigint;
BEGIN
  SELECT coalesce(sum(amount_minor), 0) INTO v_sum FROM journal_entries WHERE transfer_id = NEW.transfer_id;
  IF v_sum <> 0 THEN
    RAISE EXCEPTION 'transfer % is unbalanced: entries sum to %', NEW.transfer_id, v_sum USING ERRCODE = 'CGJ02';
  END IF;
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER journal_entries_balanced AFTER INSERT ON journal_entries
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ledger_check_transfer_balanced();

-- Down Migration
DROP TABLE journal_entries;
DROP TABLE transfers;
DROP FUNCTION ledger_check_transfer_balanced();
DROP FUNCTION ledger_refuse_change();
DROP TABLE charges;
DROP TABLE accounts;
