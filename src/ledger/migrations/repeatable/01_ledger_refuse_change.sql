-- Corrections are new entries: the journal (transfers, journal_entries) and the refunds table refuse
-- updates and deletes through this trigger function (triggers *_append_only).

CREATE OR REPLACE FUNCTION ledger_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP USING ERRCODE = 'CGJ01';
END $$;
