-- The ledger schema after every migration, as PostgreSQL reports it. Generated: do not edit;
-- run `npm run ledger:schema` and commit src/ledger/schema.sql.

CREATE TABLE accounts (
  tenant text NOT NULL,
  id text NOT NULL,
  currency character(3) NOT NULL,
  allow_overdraft boolean NOT NULL DEFAULT false,
  frozen boolean NOT NULL DEFAULT false,
  is_system boolean NOT NULL DEFAULT false,
  posted_minor bigint NOT NULL DEFAULT 0,
  pending_minor bigint NOT NULL DEFAULT 0,
  created_at timestamp with time zone NOT NULL DEFAULT now(),
  CONSTRAINT accounts_available_non_negative CHECK (allow_overdraft OR (posted_minor - pending_minor) >= 0),
  CONSTRAINT accounts_currency_check CHECK (currency ~ '^[A-Z]{3}$'::text),
  CONSTRAINT accounts_pending_minor_check CHECK (pending_minor >= 0),
  CONSTRAINT accounts_pkey PRIMARY KEY (tenant, id)
);

CREATE TABLE api_keys (
  id text NOT NULL,
  tenant text NOT NULL,
  key_hash text NOT NULL,
  key_prefix text NOT NULL,
  label text,
  created_at timestamp with time zone NOT NULL DEFAULT now(),
  revoked_at timestamp with time zone,
  role text NOT NULL DEFAULT 'agent'::text,
  last_used_at timestamp with time zone,
  max_amount_minor bigint,
  daily_limit_minor bigint,
  allowed_payee_account_ids text[],
  currency text,
  expires_at timestamp with time zone,
  signing_secret text,
  rate_limit_per_second integer,
  rate_limit_burst integer,
  max_open_holds integer,
  CONSTRAINT api_keys_allowed_payee_account_ids_check CHECK (cardinality(allowed_payee_account_ids) > 0),
  CONSTRAINT api_keys_currency_check CHECK (currency ~ '^[A-Z]{3}$'::text),
  CONSTRAINT api_keys_daily_limit_minor_check CHECK (daily_limit_minor > 0),
  CONSTRAINT api_keys_key_hash_check CHECK (key_hash ~ '^[0-9a-f]{64}$'::text),
  CONSTRAINT api_keys_key_hash_key UNIQUE (key_hash),
  CONSTRAINT api_keys_max_amount_minor_check CHECK (max_amount_minor > 0),
  CONSTRAINT api_keys_max_open_holds_check CHECK (max_open_holds >= 1 AND max_open_holds <= 100000),
  CONSTRAINT api_keys_pkey PRIMARY KEY (id),
  CONSTRAINT api_keys_rate_limit_burst_check CHECK (rate_limit_burst >= 1 AND rate_limit_burst <= 1000000),
  CONSTRAINT api_keys_rate_limit_per_second_check CHECK (rate_limit_per_second >= 1 AND rate_limit_per_second <= 1000000),
  CONSTRAINT api_keys_role_check CHECK (role = ANY (ARRAY['agent'::text, 'admin'::text])),
  CONSTRAINT api_keys_signing_secret_check CHECK (signing_secret ~ '^cgsig_[A-Za-z0-9_-]{43}$'::text),
  CONSTRAINT api_keys_tenant_check CHECK (tenant ~ '^[a-z0-9_-]{1,64}$'::text)
);

CREATE TABLE charges (
  tenant text NOT NULL,
  idempotency_key text NOT NULL,
  id text NOT NULL,
  fingerprint text NOT NULL,
  order_id text NOT NULL,
  payer_account_id text NOT NULL,
  payee_account_id text NOT NULL,
  currency character(3) NOT NULL,
  amount_minor bigint NOT NULL,
  capture_mode text NOT NULL,
  description text,
  metadata jsonb,
  hold_state text NOT NULL,
  held_minor bigint NOT NULL DEFAULT 0,
  captured_minor bigint NOT NULL DEFAULT 0,
  refunded_minor bigint NOT NULL DEFAULT 0,
  decline_code text,
  failure_reason text,
  hold_expires_at timestamp with time zone,
  created_at timestamp with time zone NOT NULL DEFAULT now(),
  updated_at timestamp with time zone NOT NULL DEFAULT now(),
  created_by_key_id text,
  provider text,
  payment_method text,
  provider_payment_id text,
  provider_state text,
  provider_next_action jsonb,
  provider_decline_code text,
  provider_authorize_sent_at timestamp with time zone,
  provider_capture_sent_at timestamp with time zone,
  CONSTRAINT charges_amount_minor_check CHECK (amount_minor > 0),
  CONSTRAINT charges_capture_mode_check CHECK (capture_mode = ANY (ARRAY['automatic'::text, 'manual'::text])),
  CONSTRAINT charges_captured_only_when_confirmed CHECK (hold_state = 'CONFIRMED'::text AND captured_minor >= 1 AND captured_minor <= amount_minor OR hold_state <> 'CONFIRMED'::text AND captured_minor = 0),
  CONSTRAINT charges_declined_has_code CHECK ((hold_state = 'DECLINED'::text) = (decline_code IS NOT NULL)),
  CONSTRAINT charges_fingerprint_check CHECK (fingerprint ~ '^(v[0-9]+:)?[0-9a-f]{64}$'::text),
  CONSTRAINT charges_held_only_while_tried CHECK (hold_state = 'TRIED'::text AND held_minor = amount_minor OR hold_state <> 'TRIED'::text AND held_minor = 0),
  CONSTRAINT charges_hold_state_check CHECK (hold_state = ANY (ARRAY['DECLINED'::text, 'TRIED'::text, 'CONFIRMED'::text, 'CANCELLED'::text])),
  CONSTRAINT charges_id_key UNIQUE (id),
  CONSTRAINT charges_idempotency_key_check CHECK (length(idempotency_key) >= 1 AND length(idempotency_key) <= 255),
  CONSTRAINT charges_pkey PRIMARY KEY (tenant, idempotency_key),
  CONSTRAINT charges_provider_captured_when_confirmed CHECK (provider_state IS DISTINCT FROM 'captured'::text OR hold_state = 'CONFIRMED'::text),
  CONSTRAINT charges_provider_named CHECK ((provider IS NULL) = (payment_method IS NULL) AND (provider IS NULL OR provider ~ '^[a-z][a-z0-9_]{0,31}$'::text) AND (payment_method IS NULL OR payment_method ~ '^[A-Za-z0-9_]{1,255}$'::text)),
  CONSTRAINT charges_provider_state CHECK (provider_state IS NULL OR provider IS NOT NULL AND (provider_state = ANY (ARRAY['authorizing'::text, 'requires_action'::text, 'authorized'::text, 'captured'::text, 'voided'::text, 'declined'::text]))),
  CONSTRAINT charges_refunds_within_capture CHECK (refunded_minor >= 0 AND refunded_minor <= captured_minor)
);

CREATE TABLE event_stream_cursor (
  one boolean NOT NULL DEFAULT true,
  from_xact xid8 NOT NULL,
  legacy_from_seq bigint NOT NULL,
  legacy_to_seq bigint NOT NULL,
  CONSTRAINT event_stream_cursor_check CHECK (legacy_from_seq <= legacy_to_seq),
  CONSTRAINT event_stream_cursor_one_check CHECK (one),
  CONSTRAINT event_stream_cursor_pkey PRIMARY KEY (one)
);

CREATE TABLE event_stream_publications (
  event_id text NOT NULL,
  attempts integer NOT NULL DEFAULT 1,
  first_sent_at timestamp with time zone NOT NULL DEFAULT now(),
  last_sent_at timestamp with time zone NOT NULL DEFAULT now(),
  published_at timestamp with time zone,
  CONSTRAINT event_stream_publications_attempts_check CHECK (attempts >= 1),
  CONSTRAINT event_stream_publications_event_id_fkey FOREIGN KEY (event_id) REFERENCES events(id),
  CONSTRAINT event_stream_publications_pkey PRIMARY KEY (event_id)
);

CREATE TABLE events (
  seq bigint NOT NULL,
  id text NOT NULL,
  tenant text NOT NULL,
  type text NOT NULL,
  object_type text NOT NULL,
  object_id text NOT NULL,
  object_sequence integer NOT NULL,
  data jsonb NOT NULL,
  created_at timestamp with time zone NOT NULL DEFAULT now(),
  xact_id xid8 DEFAULT pg_current_xact_id(),
  CONSTRAINT events_data_check CHECK (jsonb_typeof(data) = 'object'::text AND data ? 'object'::text),
  CONSTRAINT events_id_check CHECK (id ~ '^evt_[A-Za-z0-9]+$'::text AND length(id) >= 20 AND length(id) <= 68),
  CONSTRAINT events_object_id_check CHECK (object_id ~ '^[\x21-\x7e]+$'::text AND length(object_id) <= 255),
  CONSTRAINT events_object_sequence_check CHECK (object_sequence >= 1),
  CONSTRAINT events_object_sequence_unique UNIQUE (tenant, object_id, object_type, object_sequence),
  CONSTRAINT events_object_type_check CHECK (object_type ~ '^[a-z][a-z_]*$'::text AND length(object_type) <= 32),
  CONSTRAINT events_pkey PRIMARY KEY (id),
  CONSTRAINT events_seq_key UNIQUE (seq),
  CONSTRAINT events_type_check CHECK (type ~ '^[a-z][a-z_]*(\.[a-z][a-z_]*){1,3}$'::text AND length(split_part(type, '.'::text, 1)) <= 32 AND length(split_part(type, '.'::text, 2)) <= 32 AND length(split_part(type, '.'::text, 3)) <= 32 AND length(split_part(type, '.'::text, 4)) <= 32),
  CONSTRAINT events_xact_id_written CHECK (xact_id IS NOT NULL) NOT VALID
);

CREATE TABLE idempotency_tokens (
  tenant text NOT NULL,
  token_hash text NOT NULL,
  issued_by_key_id text,
  created_at timestamp with time zone NOT NULL DEFAULT now(),
  expires_at timestamp with time zone NOT NULL,
  consumed_at timestamp with time zone,
  CONSTRAINT idempotency_tokens_check CHECK (expires_at > created_at),
  CONSTRAINT idempotency_tokens_pkey PRIMARY KEY (tenant, token_hash),
  CONSTRAINT idempotency_tokens_tenant_check CHECK (tenant ~ '^[a-z0-9_-]{1,64}$'::text),
  CONSTRAINT idempotency_tokens_token_hash_check CHECK (token_hash ~ '^[0-9a-f]{64}$'::text)
);

CREATE TABLE journal_entries (
  id bigint NOT NULL DEFAULT nextval('journal_entries_id_seq'::regclass),
  transfer_id bigint NOT NULL,
  tenant text NOT NULL,
  account_id text NOT NULL,
  amount_minor bigint NOT NULL,
  created_at timestamp with time zone NOT NULL DEFAULT now(),
  CONSTRAINT journal_entries_amount_minor_check CHECK (amount_minor <> 0),
  CONSTRAINT journal_entries_pkey PRIMARY KEY (id)
);

CREATE TABLE pending_postings (
  tenant text NOT NULL,
  account_id text NOT NULL,
  entry_id bigint NOT NULL,
  posted_delta_minor bigint NOT NULL,
  pending_delta_minor bigint NOT NULL,
  CONSTRAINT pending_postings_pending_delta_minor_check CHECK (pending_delta_minor <= 0),
  CONSTRAINT pending_postings_pkey PRIMARY KEY (tenant, account_id, entry_id),
  CONSTRAINT pending_postings_posted_delta_minor_check CHECK (posted_delta_minor <> 0)
);

CREATE TABLE provider_events (
  provider text NOT NULL,
  event_id text NOT NULL,
  event_type text NOT NULL,
  payment_id text,
  tenant text,
  charge_key text,
  action text NOT NULL,
  detail text,
  received_at timestamp with time zone NOT NULL DEFAULT now(),
  CONSTRAINT provider_events_action_check CHECK (action = ANY (ARRAY['signalled'::text, 'voided'::text, 'void_refused'::text, 'no_action'::text, 'no_charge'::text, 'not_ours'::text, 'not_a_payment'::text, 'payment_mismatch'::text])),
  CONSTRAINT provider_events_check CHECK ((tenant IS NULL) = (charge_key IS NULL)),
  CONSTRAINT provider_events_detail_check CHECK (length(detail) <= 2000),
  CONSTRAINT provider_events_event_id_check CHECK (event_id ~ '^[\x21-\x7e]{1,255}$'::text),
  CONSTRAINT provider_events_event_type_check CHECK (event_type ~ '^[\x21-\x7e]{1,255}$'::text),
  CONSTRAINT provider_events_payment_id_check CHECK (payment_id ~ '^[\x21-\x7e]{1,255}$'::text),
  CONSTRAINT provider_events_pkey PRIMARY KEY (provider, event_id),
  CONSTRAINT provider_events_provider_check CHECK (provider ~ '^[a-z][a-z0-9_]{0,31}$'::text),
  CONSTRAINT provider_events_tenant_charge_key_fkey FOREIGN KEY (tenant, charge_key) REFERENCES charges(tenant, idempotency_key)
);

CREATE UNLOGGED TABLE rate_limit_buckets (
  scope text NOT NULL,
  subject text NOT NULL,
  tokens double precision NOT NULL,
  rate_per_second double precision NOT NULL,
  burst double precision NOT NULL,
  refilled_at timestamp with time zone NOT NULL,
  last_take_allowed boolean NOT NULL,
  CONSTRAINT rate_limit_buckets_burst_check CHECK (burst >= 1::double precision),
  CONSTRAINT rate_limit_buckets_pkey PRIMARY KEY (scope, subject),
  CONSTRAINT rate_limit_buckets_rate_per_second_check CHECK (rate_per_second > 0::double precision),
  CONSTRAINT rate_limit_buckets_scope_check CHECK (scope = ANY (ARRAY['key'::text, 'tenant'::text, 'stranger'::text, 'webhook_address'::text, 'webhook_provider'::text, 'health'::text])),
  CONSTRAINT rate_limit_buckets_tokens_check CHECK (tokens >= 0::double precision)
);

CREATE TABLE refunds (
  tenant text NOT NULL,
  charge_key text NOT NULL,
  refund_key text NOT NULL,
  id text NOT NULL,
  charge_id text NOT NULL,
  currency character(3) NOT NULL,
  fingerprint text NOT NULL,
  requested_minor bigint,
  amount_minor bigint NOT NULL,
  status text NOT NULL,
  failure_code text,
  transfer_id bigint,
  created_at timestamp with time zone NOT NULL DEFAULT now(),
  created_by_key_id text,
  provider_refund_id text,
  provider_refunded_at timestamp with time zone,
  provider_refund_failure text,
  CONSTRAINT refunds_amount_minor_check CHECK (amount_minor >= 0),
  CONSTRAINT refunds_failure_code_check CHECK (failure_code = ANY (ARRAY['exceeds_refundable'::text, 'insufficient_funds'::text])),
  CONSTRAINT refunds_fingerprint_check CHECK (fingerprint ~ '^(v[0-9]+:)?[0-9a-f]{64}$'::text),
  CONSTRAINT refunds_id_key UNIQUE (id),
  CONSTRAINT refunds_outcome CHECK (status = 'succeeded'::text AND amount_minor > 0 AND transfer_id IS NOT NULL AND failure_code IS NULL OR status = 'failed'::text AND transfer_id IS NULL AND failure_code IS NOT NULL),
  CONSTRAINT refunds_pkey PRIMARY KEY (tenant, charge_key, refund_key),
  CONSTRAINT refunds_provider_refund CHECK ((provider_refund_id IS NULL) = (provider_refunded_at IS NULL) AND (provider_refund_id IS NULL OR length(provider_refund_id) >= 1 AND length(provider_refund_id) <= 255) AND (provider_refund_failure IS NULL OR length(provider_refund_failure) >= 1 AND length(provider_refund_failure) <= 2000) AND (status = 'succeeded'::text OR provider_refund_id IS NULL AND provider_refund_failure IS NULL)),
  CONSTRAINT refunds_refund_key_check CHECK (length(refund_key) >= 1 AND length(refund_key) <= 255),
  CONSTRAINT refunds_requested_minor_check CHECK (requested_minor IS NULL OR requested_minor > 0),
  CONSTRAINT refunds_status_check CHECK (status = ANY (ARRAY['succeeded'::text, 'failed'::text])),
  CONSTRAINT refunds_tenant_charge_key_fkey FOREIGN KEY (tenant, charge_key) REFERENCES charges(tenant, idempotency_key),
  CONSTRAINT refunds_transfer_id_fkey FOREIGN KEY (transfer_id) REFERENCES transfers(id),
  CONSTRAINT refunds_transfer_id_key UNIQUE (transfer_id)
);

CREATE TABLE signature_nonces (
  key_id text NOT NULL,
  nonce text NOT NULL,
  expires_at timestamp with time zone NOT NULL,
  CONSTRAINT signature_nonces_key_id_fkey FOREIGN KEY (key_id) REFERENCES api_keys(id) ON DELETE CASCADE,
  CONSTRAINT signature_nonces_nonce_check CHECK (nonce ~ '^[\x21-\x7e]{1,128}$'::text),
  CONSTRAINT signature_nonces_pkey PRIMARY KEY (key_id, nonce)
);

CREATE TABLE transfers (
  id bigint NOT NULL DEFAULT nextval('transfers_id_seq'::regclass),
  tenant text NOT NULL,
  kind text NOT NULL,
  reference text NOT NULL,
  currency character(3) NOT NULL,
  amount_minor bigint NOT NULL,
  created_at timestamp with time zone NOT NULL DEFAULT now(),
  created_by_key_id text,
  CONSTRAINT transfers_amount_minor_check CHECK (amount_minor > 0),
  CONSTRAINT transfers_kind_check CHECK (kind = ANY (ARRAY['capture'::text, 'refund'::text, 'deposit'::text])),
  CONSTRAINT transfers_pkey PRIMARY KEY (id),
  CONSTRAINT transfers_tenant_kind_reference_key UNIQUE (tenant, kind, reference)
);

CREATE TABLE webhook_deliveries (
  id bigint NOT NULL,
  endpoint_id text NOT NULL,
  event_id text NOT NULL,
  tenant text NOT NULL,
  requested boolean NOT NULL DEFAULT false,
  state text NOT NULL DEFAULT 'pending'::text,
  attempts integer NOT NULL DEFAULT 0,
  next_attempt_at timestamp with time zone NOT NULL DEFAULT now(),
  lease_owner text,
  lease_expires_at timestamp with time zone,
  created_at timestamp with time zone NOT NULL DEFAULT now(),
  finished_at timestamp with time zone,
  CONSTRAINT webhook_deliveries_attempts_check CHECK (attempts >= 0),
  CONSTRAINT webhook_deliveries_check CHECK ((state = 'pending'::text) = (finished_at IS NULL)),
  CONSTRAINT webhook_deliveries_endpoint_id_fkey FOREIGN KEY (endpoint_id) REFERENCES webhook_endpoints(id) ON DELETE CASCADE,
  CONSTRAINT webhook_deliveries_pkey PRIMARY KEY (id),
  CONSTRAINT webhook_deliveries_state_check CHECK (state = ANY (ARRAY['pending'::text, 'delivered'::text, 'failed'::text]))
);

CREATE TABLE webhook_delivery_attempts (
  id bigint NOT NULL,
  delivery_id bigint NOT NULL,
  endpoint_id text NOT NULL,
  event_id text NOT NULL,
  attempt integer NOT NULL,
  started_at timestamp with time zone NOT NULL,
  duration_ms integer NOT NULL,
  status_code integer,
  error text,
  delivered boolean NOT NULL,
  CONSTRAINT webhook_delivery_attempts_attempt_check CHECK (attempt >= 1),
  CONSTRAINT webhook_delivery_attempts_check CHECK (status_code IS NOT NULL OR error IS NOT NULL),
  CONSTRAINT webhook_delivery_attempts_delivery_id_fkey FOREIGN KEY (delivery_id) REFERENCES webhook_deliveries(id) ON DELETE CASCADE,
  CONSTRAINT webhook_delivery_attempts_duration_ms_check CHECK (duration_ms >= 0),
  CONSTRAINT webhook_delivery_attempts_error_check CHECK (length(error) <= 500),
  CONSTRAINT webhook_delivery_attempts_pkey PRIMARY KEY (id),
  CONSTRAINT webhook_delivery_attempts_status_code_check CHECK (status_code >= 100 AND status_code <= 599)
);

CREATE TABLE webhook_endpoint_creations (
  tenant text NOT NULL,
  idempotency_key text NOT NULL,
  fingerprint text NOT NULL,
  endpoint_id text NOT NULL,
  secret_id text NOT NULL,
  answer jsonb NOT NULL,
  created_at timestamp with time zone NOT NULL DEFAULT now(),
  CONSTRAINT webhook_endpoint_creations_answer_check CHECK (jsonb_typeof(answer) = 'object'::text AND NOT answer ? 'secret'::text),
  CONSTRAINT webhook_endpoint_creations_endpoint_id_check CHECK (endpoint_id ~ '^we_[A-Za-z0-9]{24}$'::text),
  CONSTRAINT webhook_endpoint_creations_fingerprint_check CHECK (fingerprint ~ '^v[0-9]+:[0-9a-f]{64}$'::text),
  CONSTRAINT webhook_endpoint_creations_idempotency_key_check CHECK (idempotency_key ~ '^[\x21-\x7e]{1,255}$'::text),
  CONSTRAINT webhook_endpoint_creations_pkey PRIMARY KEY (tenant, idempotency_key),
  CONSTRAINT webhook_endpoint_creations_secret_id_check CHECK (secret_id ~ '^wes_[0-9a-f]{16}$'::text)
);

CREATE TABLE webhook_endpoint_secrets (
  id text NOT NULL,
  endpoint_id text NOT NULL,
  secret text NOT NULL,
  created_at timestamp with time zone NOT NULL DEFAULT now(),
  expires_at timestamp with time zone,
  CONSTRAINT webhook_endpoint_secrets_endpoint_id_fkey FOREIGN KEY (endpoint_id) REFERENCES webhook_endpoints(id) ON DELETE CASCADE,
  CONSTRAINT webhook_endpoint_secrets_id_check CHECK (id ~ '^wes_[0-9a-f]{16}$'::text),
  CONSTRAINT webhook_endpoint_secrets_pkey PRIMARY KEY (id),
  CONSTRAINT webhook_endpoint_secrets_secret_check CHECK (secret ~ '^whsec_[A-Za-z0-9+/]{43}=$'::text),
  CONSTRAINT webhook_endpoint_secrets_secret_key UNIQUE (secret)
);

CREATE TABLE webhook_endpoints (
  seq bigint NOT NULL,
  id text NOT NULL,
  tenant text NOT NULL,
  url text NOT NULL,
  enabled_events text[] NOT NULL,
  description text,
  disabled_at timestamp with time zone,
  disabled_reason text,
  failing_since timestamp with time zone,
  created_at timestamp with time zone NOT NULL DEFAULT now(),
  updated_at timestamp with time zone NOT NULL DEFAULT now(),
  cursor_xact xid8 NOT NULL DEFAULT pg_snapshot_xmin(pg_current_snapshot()),
  cursor_seq bigint NOT NULL DEFAULT 0,
  cursor_from_seq bigint NOT NULL,
  cursor_owner text,
  cursor_lease_expires_at timestamp with time zone,
  cursor_slots integer NOT NULL DEFAULT 0,
  CONSTRAINT webhook_endpoints_check CHECK ((disabled_at IS NULL) = (disabled_reason IS NULL)),
  CONSTRAINT webhook_endpoints_check1 CHECK ((cursor_owner IS NULL) = (cursor_lease_expires_at IS NULL)),
  CONSTRAINT webhook_endpoints_cursor_slots_check CHECK (cursor_slots >= 0),
  CONSTRAINT webhook_endpoints_description_check CHECK (length(description) <= 500),
  CONSTRAINT webhook_endpoints_disabled_reason_check CHECK (disabled_reason = ANY (ARRAY['requested'::text, 'gone'::text, 'failing'::text])),
  CONSTRAINT webhook_endpoints_enabled_events_check CHECK (cardinality(enabled_events) >= 1 AND cardinality(enabled_events) <= 64),
  CONSTRAINT webhook_endpoints_id_check CHECK (id ~ '^we_[A-Za-z0-9]{24}$'::text),
  CONSTRAINT webhook_endpoints_pkey PRIMARY KEY (id),
  CONSTRAINT webhook_endpoints_seq_key UNIQUE (seq),
  CONSTRAINT webhook_endpoints_url_check CHECK (url ~ '^https?://[\x21-\x7e]+$'::text AND length(url) <= 2048)
);

CREATE TABLE webhook_events (
  provider text NOT NULL,
  event_id text NOT NULL,
  event_type text NOT NULL,
  tenant text NOT NULL,
  account_id text NOT NULL,
  amount_minor bigint NOT NULL,
  currency character(3) NOT NULL,
  transfer_id bigint NOT NULL,
  secret_id text NOT NULL,
  received_at timestamp with time zone NOT NULL DEFAULT now(),
  CONSTRAINT webhook_events_amount_minor_check CHECK (amount_minor > 0),
  CONSTRAINT webhook_events_event_id_check CHECK (event_id ~ '^[\x21-\x7e]{1,255}$'::text),
  CONSTRAINT webhook_events_pkey PRIMARY KEY (provider, event_id),
  CONSTRAINT webhook_events_provider_check CHECK (provider ~ '^[a-z0-9][a-z0-9_-]{0,31}$'::text),
  CONSTRAINT webhook_events_secret_id_fkey FOREIGN KEY (secret_id) REFERENCES webhook_secrets(id),
  CONSTRAINT webhook_events_transfer_id_fkey FOREIGN KEY (transfer_id) REFERENCES transfers(id),
  CONSTRAINT webhook_events_transfer_id_key UNIQUE (transfer_id)
);

CREATE TABLE webhook_secrets (
  id text NOT NULL,
  provider text NOT NULL,
  secret text NOT NULL,
  created_at timestamp with time zone NOT NULL DEFAULT now(),
  expires_at timestamp with time zone,
  revoked_at timestamp with time zone,
  CONSTRAINT webhook_secrets_id_check CHECK (id ~ '^whk_[0-9a-f]{16}$'::text),
  CONSTRAINT webhook_secrets_pkey PRIMARY KEY (id),
  CONSTRAINT webhook_secrets_provider_check CHECK (provider ~ '^[a-z0-9][a-z0-9_-]{0,31}$'::text),
  CONSTRAINT webhook_secrets_secret_check CHECK (secret ~ '^whsec_[A-Za-z0-9_-]{43}$'::text),
  CONSTRAINT webhook_secrets_secret_key UNIQUE (secret)
);

CREATE INDEX api_keys_by_tenant ON public.api_keys USING btree (tenant, created_at);
CREATE INDEX charges_by_order ON public.charges USING btree (tenant, order_id);
CREATE INDEX charges_by_payer ON public.charges USING btree (tenant, payer_account_id, created_at);
CREATE INDEX charges_by_state ON public.charges USING btree (tenant, hold_state, created_at);
CREATE INDEX charges_created_by_key_recent ON public.charges USING btree (created_by_key_id, created_at) WHERE (created_by_key_id IS NOT NULL);
CREATE INDEX charges_open_holds ON public.charges USING btree (hold_expires_at) WHERE (hold_state = 'TRIED'::text);
CREATE INDEX charges_open_holds_by_key ON public.charges USING btree (created_by_key_id) WHERE ((hold_state = 'TRIED'::text) AND (created_by_key_id IS NOT NULL));
CREATE INDEX charges_open_holds_by_tenant ON public.charges USING btree (tenant) WHERE (hold_state = 'TRIED'::text);
CREATE INDEX charges_provider_open ON public.charges USING btree (tenant, created_at) WHERE ((provider IS NOT NULL) AND (provider_state = ANY (ARRAY['authorizing'::text, 'requires_action'::text, 'authorized'::text])));
CREATE UNIQUE INDEX charges_provider_payment ON public.charges USING btree (provider, provider_payment_id) WHERE (provider_payment_id IS NOT NULL);
CREATE INDEX charges_without_key ON public.charges USING btree (tenant, idempotency_key) WHERE (created_by_key_id IS NULL);
CREATE INDEX event_stream_unacknowledged ON public.event_stream_publications USING btree (event_id) WHERE (published_at IS NULL);
CREATE INDEX events_by_tenant ON public.events USING btree (tenant, seq);
CREATE INDEX events_by_tenant_xact ON public.events USING btree (tenant, xact_id, seq) WHERE (xact_id IS NOT NULL);
CREATE INDEX events_by_type ON public.events USING btree (tenant, type, seq);
CREATE INDEX events_by_xact ON public.events USING btree (xact_id) WHERE (xact_id IS NOT NULL);
CREATE INDEX idempotency_tokens_unused_by_expiry ON public.idempotency_tokens USING btree (tenant, expires_at) WHERE (consumed_at IS NULL);
CREATE INDEX journal_entries_by_account ON public.journal_entries USING btree (tenant, account_id);
CREATE INDEX journal_entries_by_transfer ON public.journal_entries USING btree (transfer_id);
CREATE INDEX provider_events_by_payment ON public.provider_events USING btree (provider, payment_id, received_at) WHERE (payment_id IS NOT NULL);
CREATE INDEX refunds_by_tenant ON public.refunds USING btree (tenant, created_at, id);
CREATE INDEX refunds_provider_unsettled ON public.refunds USING btree (tenant, created_at) WHERE ((provider_refund_failure IS NOT NULL) AND (provider_refund_id IS NULL));
CREATE INDEX signature_nonces_by_expiry ON public.signature_nonces USING btree (expires_at);
CREATE INDEX webhook_deliveries_due ON public.webhook_deliveries USING btree (endpoint_id, next_attempt_at, id) WHERE (state = 'pending'::text);
CREATE INDEX webhook_deliveries_finished ON public.webhook_deliveries USING btree (finished_at, id) WHERE (finished_at IS NOT NULL);
CREATE INDEX webhook_deliveries_leased ON public.webhook_deliveries USING btree (endpoint_id) WHERE (lease_expires_at IS NOT NULL);
CREATE UNIQUE INDEX webhook_deliveries_once ON public.webhook_deliveries USING btree (endpoint_id, event_id) WHERE (NOT requested);
CREATE INDEX webhook_delivery_attempts_by_delivery ON public.webhook_delivery_attempts USING btree (delivery_id);
CREATE INDEX webhook_delivery_attempts_by_endpoint ON public.webhook_delivery_attempts USING btree (endpoint_id, id);
CREATE INDEX webhook_endpoint_secrets_by_endpoint ON public.webhook_endpoint_secrets USING btree (endpoint_id, created_at);
CREATE INDEX webhook_endpoints_by_tenant ON public.webhook_endpoints USING btree (tenant, seq);
CREATE INDEX webhook_events_by_tenant ON public.webhook_events USING btree (tenant, received_at);
CREATE INDEX webhook_secrets_by_provider ON public.webhook_secrets USING btree (provider, created_at);

CREATE SEQUENCE events_seq_seq AS bigint START 1 INCREMENT 1 OWNED BY events.seq;
CREATE SEQUENCE journal_entries_id_seq AS bigint START 1 INCREMENT 1 OWNED BY journal_entries.id;
CREATE SEQUENCE transfers_id_seq AS bigint START 1 INCREMENT 1 OWNED BY transfers.id;
CREATE SEQUENCE webhook_deliveries_id_seq AS bigint START 1 INCREMENT 1 OWNED BY webhook_deliveries.id;
CREATE SEQUENCE webhook_delivery_attempts_id_seq AS bigint START 1 INCREMENT 1 OWNED BY webhook_delivery_attempts.id;
CREATE SEQUENCE webhook_endpoints_seq_seq AS bigint START 1 INCREMENT 1 OWNED BY webhook_endpoints.seq;

CREATE VIEW account_balances AS
 SELECT a.tenant,
    a.id,
    a.currency,
    a.allow_overdraft,
    a.frozen,
    a.is_system,
    (a.posted_minor::numeric + COALESCE(p.posted_delta_minor, 0::numeric))::bigint AS posted_minor,
    (a.pending_minor::numeric + COALESCE(p.pending_delta_minor, 0::numeric))::bigint AS pending_minor,
    a.created_at
   FROM accounts a
     LEFT JOIN LATERAL ( SELECT sum(q.posted_delta_minor) AS posted_delta_minor,
            sum(q.pending_delta_minor) AS pending_delta_minor
           FROM pending_postings q
          WHERE q.tenant = a.tenant AND q.account_id = a.id) p ON true;

CREATE VIEW charge_statuses AS
 SELECT 'reserved'::text AS status,
    c.tenant,
    c.idempotency_key,
    c.id,
    c.fingerprint,
    c.order_id,
    c.payer_account_id,
    c.payee_account_id,
    c.currency,
    c.amount_minor,
    c.capture_mode,
    c.description,
    c.metadata,
    c.hold_state,
    c.held_minor,
    c.captured_minor,
    c.refunded_minor,
    c.decline_code,
    c.failure_reason,
    c.hold_expires_at,
    c.created_at,
    c.updated_at,
    c.created_by_key_id,
    c.provider,
    c.payment_method,
    c.provider_payment_id,
    c.provider_state,
    c.provider_next_action,
    c.provider_decline_code,
    c.provider_authorize_sent_at,
    c.provider_capture_sent_at
   FROM charges c
  WHERE c.hold_state = 'TRIED'::text AND c.provider_state IS DISTINCT FROM 'requires_action'::text
UNION ALL
 SELECT 'requires_action'::text AS status,
    c.tenant,
    c.idempotency_key,
    c.id,
    c.fingerprint,
    c.order_id,
    c.payer_account_id,
    c.payee_account_id,
    c.currency,
    c.amount_minor,
    c.capture_mode,
    c.description,
    c.metadata,
    c.hold_state,
    c.held_minor,
    c.captured_minor,
    c.refunded_minor,
    c.decline_code,
    c.failure_reason,
    c.hold_expires_at,
    c.created_at,
    c.updated_at,
    c.created_by_key_id,
    c.provider,
    c.payment_method,
    c.provider_payment_id,
    c.provider_state,
    c.provider_next_action,
    c.provider_decline_code,
    c.provider_authorize_sent_at,
    c.provider_capture_sent_at
   FROM charges c
  WHERE c.hold_state = 'TRIED'::text AND c.provider_state = 'requires_action'::text
UNION ALL
 SELECT 'declined'::text AS status,
    c.tenant,
    c.idempotency_key,
    c.id,
    c.fingerprint,
    c.order_id,
    c.payer_account_id,
    c.payee_account_id,
    c.currency,
    c.amount_minor,
    c.capture_mode,
    c.description,
    c.metadata,
    c.hold_state,
    c.held_minor,
    c.captured_minor,
    c.refunded_minor,
    c.decline_code,
    c.failure_reason,
    c.hold_expires_at,
    c.created_at,
    c.updated_at,
    c.created_by_key_id,
    c.provider,
    c.payment_method,
    c.provider_payment_id,
    c.provider_state,
    c.provider_next_action,
    c.provider_decline_code,
    c.provider_authorize_sent_at,
    c.provider_capture_sent_at
   FROM charges c
  WHERE c.hold_state = 'DECLINED'::text
UNION ALL
 SELECT 'cancelling'::text AS status,
    c.tenant,
    c.idempotency_key,
    c.id,
    c.fingerprint,
    c.order_id,
    c.payer_account_id,
    c.payee_account_id,
    c.currency,
    c.amount_minor,
    c.capture_mode,
    c.description,
    c.metadata,
    c.hold_state,
    c.held_minor,
    c.captured_minor,
    c.refunded_minor,
    c.decline_code,
    c.failure_reason,
    c.hold_expires_at,
    c.created_at,
    c.updated_at,
    c.created_by_key_id,
    c.provider,
    c.payment_method,
    c.provider_payment_id,
    c.provider_state,
    c.provider_next_action,
    c.provider_decline_code,
    c.provider_authorize_sent_at,
    c.provider_capture_sent_at
   FROM charges c
  WHERE c.hold_state = 'CANCELLED'::text AND (c.provider_state = ANY (ARRAY['authorizing'::text, 'authorized'::text, 'requires_action'::text]))
UNION ALL
 SELECT 'cancelled'::text AS status,
    c.tenant,
    c.idempotency_key,
    c.id,
    c.fingerprint,
    c.order_id,
    c.payer_account_id,
    c.payee_account_id,
    c.currency,
    c.amount_minor,
    c.capture_mode,
    c.description,
    c.metadata,
    c.hold_state,
    c.held_minor,
    c.captured_minor,
    c.refunded_minor,
    c.decline_code,
    c.failure_reason,
    c.hold_expires_at,
    c.created_at,
    c.updated_at,
    c.created_by_key_id,
    c.provider,
    c.payment_method,
    c.provider_payment_id,
    c.provider_state,
    c.provider_next_action,
    c.provider_decline_code,
    c.provider_authorize_sent_at,
    c.provider_capture_sent_at
   FROM charges c
  WHERE c.hold_state = 'CANCELLED'::text AND (c.provider_state = ANY (ARRAY['authorizing'::text, 'authorized'::text, 'requires_action'::text])) IS NOT TRUE
UNION ALL
 SELECT 'succeeded'::text AS status,
    c.tenant,
    c.idempotency_key,
    c.id,
    c.fingerprint,
    c.order_id,
    c.payer_account_id,
    c.payee_account_id,
    c.currency,
    c.amount_minor,
    c.capture_mode,
    c.description,
    c.metadata,
    c.hold_state,
    c.held_minor,
    c.captured_minor,
    c.refunded_minor,
    c.decline_code,
    c.failure_reason,
    c.hold_expires_at,
    c.created_at,
    c.updated_at,
    c.created_by_key_id,
    c.provider,
    c.payment_method,
    c.provider_payment_id,
    c.provider_state,
    c.provider_next_action,
    c.provider_decline_code,
    c.provider_authorize_sent_at,
    c.provider_capture_sent_at
   FROM charges c
  WHERE c.hold_state = 'CONFIRMED'::text AND c.refunded_minor = 0
UNION ALL
 SELECT 'partially_refunded'::text AS status,
    c.tenant,
    c.idempotency_key,
    c.id,
    c.fingerprint,
    c.order_id,
    c.payer_account_id,
    c.payee_account_id,
    c.currency,
    c.amount_minor,
    c.capture_mode,
    c.description,
    c.metadata,
    c.hold_state,
    c.held_minor,
    c.captured_minor,
    c.refunded_minor,
    c.decline_code,
    c.failure_reason,
    c.hold_expires_at,
    c.created_at,
    c.updated_at,
    c.created_by_key_id,
    c.provider,
    c.payment_method,
    c.provider_payment_id,
    c.provider_state,
    c.provider_next_action,
    c.provider_decline_code,
    c.provider_authorize_sent_at,
    c.provider_capture_sent_at
   FROM charges c
  WHERE c.hold_state = 'CONFIRMED'::text AND c.refunded_minor > 0 AND c.refunded_minor < c.captured_minor
UNION ALL
 SELECT 'refunded'::text AS status,
    c.tenant,
    c.idempotency_key,
    c.id,
    c.fingerprint,
    c.order_id,
    c.payer_account_id,
    c.payee_account_id,
    c.currency,
    c.amount_minor,
    c.capture_mode,
    c.description,
    c.metadata,
    c.hold_state,
    c.held_minor,
    c.captured_minor,
    c.refunded_minor,
    c.decline_code,
    c.failure_reason,
    c.hold_expires_at,
    c.created_at,
    c.updated_at,
    c.created_by_key_id,
    c.provider,
    c.payment_method,
    c.provider_payment_id,
    c.provider_state,
    c.provider_next_action,
    c.provider_decline_code,
    c.provider_authorize_sent_at,
    c.provider_capture_sent_at
   FROM charges c
  WHERE c.hold_state = 'CONFIRMED'::text AND c.refunded_minor > 0 AND c.refunded_minor >= c.captured_minor;

CREATE OR REPLACE FUNCTION public.ledger_amount_minor_max()
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT 1000000000000::bigint
$function$;

CREATE OR REPLACE FUNCTION public.ledger_cancel(p_tenant text, p_key text, p_charge_id text, p_fingerprint text, p_order_id text, p_payer text, p_payee text, p_currency text, p_amount_minor bigint, p_capture_mode text, p_description text, p_metadata jsonb, p_reason text)
 RETURNS charges
 LANGUAGE plpgsql
AS $function$
DECLARE
  r charges;
BEGIN
  -- Null compensation: Cancel before any Try leaves a tombstone, so a late Try cannot reserve.
  INSERT INTO charges (tenant, idempotency_key, id, fingerprint, order_id, payer_account_id,
                       payee_account_id, currency, amount_minor, capture_mode, description, metadata,
                       hold_state, failure_reason)
  VALUES (p_tenant, p_key, p_charge_id, p_fingerprint, p_order_id, p_payer, p_payee, p_currency,
          p_amount_minor, p_capture_mode, p_description, p_metadata, 'CANCELLED', p_reason)
  ON CONFLICT DO NOTHING
  RETURNING * INTO r;
  IF FOUND THEN
    -- The outbox (docs/events.md): the tombstone's cancelled is the charge's first event.
    INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data)
    VALUES (ledger_event_id(), r.tenant, 'charge.cancelled', 'charge', r.id, 1, jsonb_build_object('object', to_jsonb(r)));
    RETURN r;
  END IF;

  SELECT * INTO STRICT r FROM charges WHERE tenant = p_tenant AND idempotency_key = p_key FOR UPDATE;
  CASE r.hold_state
    WHEN 'DECLINED', 'CANCELLED' THEN RETURN r; -- nothing held
    WHEN 'CONFIRMED' THEN
      RAISE EXCEPTION 'charge % was already captured; refund it instead', p_key USING ERRCODE = 'CGH04';
    ELSE NULL; -- TRIED: release below
  END CASE;
  IF r.provider_capture_sent_at IS NOT NULL THEN
    -- A provider charge whose capture was sent and not yet answered: the money may be moving at
    -- the provider, so the hold stays until the capture's answer is recorded (docs/providers.md).
    RAISE EXCEPTION 'charge % is being captured at its provider; it cannot be cancelled now', p_key
      USING ERRCODE = 'CGH05';
  END IF;

  UPDATE accounts SET pending_minor = pending_minor - r.held_minor
   WHERE tenant = p_tenant AND id = r.payer_account_id;
  UPDATE charges SET hold_state = 'CANCELLED', held_minor = 0, hold_expires_at = NULL,
                     failure_reason = p_reason, updated_at = now()
   WHERE tenant = p_tenant AND idempotency_key = p_key
   RETURNING * INTO STRICT r;
  -- A ledger charge's event here; a provider charge's (cancelling until its void) by the deferred
  -- trigger charges_state_event. The row is locked (FOR UPDATE above) until COMMIT.
  IF r.provider IS NULL THEN
    INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data)
    VALUES (ledger_event_id(), r.tenant, 'charge.cancelled', 'charge', r.id,
            coalesce((SELECT max(e.object_sequence) FROM events e WHERE e.tenant = r.tenant AND e.object_id = r.id AND e.object_type = 'charge'), 0) + 1,
            jsonb_build_object('object', to_jsonb(r)));
  END IF;
  RETURN r;
END $function$;

CREATE OR REPLACE FUNCTION public.ledger_charge_event()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
  r charges;
  v_status text;
  v_last_type text;
  v_last_sequence integer;
BEGIN
  SELECT * INTO STRICT r FROM charges WHERE tenant = NEW.tenant AND idempotency_key = NEW.idempotency_key;
  v_status := ledger_charge_status(r.hold_state, r.captured_minor, r.refunded_minor, r.provider_state);
  IF v_status NOT IN ('reserved', 'requires_action', 'succeeded', 'declined', 'cancelled') THEN
    RETURN NULL;
  END IF;
  SELECT e.type, e.object_sequence INTO v_last_type, v_last_sequence FROM events e
   WHERE e.tenant = r.tenant AND e.object_id = r.id AND e.object_type = 'charge'
   ORDER BY e.object_sequence DESC LIMIT 1;
  IF v_last_type IS NOT DISTINCT FROM 'charge.' || v_status THEN
    RETURN NULL;
  END IF;
  INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data)
  VALUES (ledger_event_id(), r.tenant, 'charge.' || v_status, 'charge', r.id, coalesce(v_last_sequence, 0) + 1,
          jsonb_build_object('object', to_jsonb(r)));
  RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION public.ledger_charge_status(p_hold_state text, p_captured_minor bigint, p_refunded_minor bigint, p_provider_state text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT CASE p_hold_state
    WHEN 'DECLINED' THEN 'declined'
    WHEN 'TRIED' THEN CASE WHEN p_provider_state = 'requires_action' THEN 'requires_action' ELSE 'reserved' END
    -- The provider may still hold the payment: its void is not recorded yet.
    WHEN 'CANCELLED' THEN CASE WHEN p_provider_state IN ('authorizing', 'authorized', 'requires_action') THEN 'cancelling' ELSE 'cancelled' END
    WHEN 'CONFIRMED' THEN CASE WHEN p_refunded_minor = 0 THEN 'succeeded'
                               WHEN p_refunded_minor >= p_captured_minor THEN 'refunded'
                               ELSE 'partially_refunded' END
  END
$function$;

CREATE OR REPLACE FUNCTION public.ledger_check_journal_insert()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_bad record;
BEGIN
  SELECT transfer_id, sum(amount_minor) AS sum_minor, count(*) AS entries INTO v_bad
    FROM new_entries GROUP BY transfer_id HAVING sum(amount_minor) <> 0 OR count(*) < 2 LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'transfer % is unbalanced: the % entries written together sum to %',
      v_bad.transfer_id, v_bad.entries, v_bad.sum_minor USING ERRCODE = 'CGJ02';
  END IF;
  SELECT e.transfer_id, e.tenant, e.account_id INTO v_bad FROM new_entries e
   WHERE NOT EXISTS (SELECT 1 FROM transfers t WHERE t.id = e.transfer_id AND t.tenant = e.tenant)
      OR NOT EXISTS (SELECT 1 FROM accounts a WHERE a.tenant = e.tenant AND a.id = e.account_id)
   LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'journal entry of transfer % names no transfer or no account % of tenant %',
      v_bad.transfer_id, v_bad.account_id, v_bad.tenant USING ERRCODE = '23503';
  END IF;
  RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION public.ledger_confirm(p_tenant text, p_key text, p_capture_minor bigint)
 RETURNS charges
 LANGUAGE plpgsql
AS $function$
DECLARE
  r charges;
  v_transfer_id bigint;
BEGIN
  -- While TRIED, held_minor = amount_minor (CHECK charges_held_only_while_tried), so the row this
  -- returns still says what was held: amount_minor.
  UPDATE charges SET hold_state = 'CONFIRMED', held_minor = 0,
                     captured_minor = coalesce(p_capture_minor, held_minor),
                     hold_expires_at = NULL, updated_at = now()
   WHERE tenant = p_tenant AND idempotency_key = p_key AND hold_state = 'TRIED'
     AND coalesce(p_capture_minor, held_minor) BETWEEN 1 AND held_minor
     AND amount_minor <= ledger_amount_minor_max()
  RETURNING * INTO r;

  IF NOT FOUND THEN
    -- Not a capture this time: answer as the truth table says.
    SELECT * INTO r FROM charges WHERE tenant = p_tenant AND idempotency_key = p_key;
    IF NOT FOUND THEN
      RAISE EXCEPTION 'charge % was never tried; nothing to confirm', p_key USING ERRCODE = 'CGH02';
    END IF;
    CASE r.hold_state
      WHEN 'CONFIRMED' THEN RETURN r;
      WHEN 'DECLINED' THEN
        RAISE EXCEPTION 'charge % was declined (%); nothing to confirm', p_key, r.decline_code
          USING ERRCODE = 'CGH03';
      WHEN 'CANCELLED' THEN
        RAISE EXCEPTION 'charge % was cancelled; it can no longer be captured', p_key
          USING ERRCODE = 'CGH01';
      ELSE
        IF r.amount_minor > ledger_amount_minor_max() THEN
          RAISE EXCEPTION 'charge % holds % minor units, above the ledger''s maximum of %; it will not be captured',
            p_key, r.amount_minor, ledger_amount_minor_max() USING ERRCODE = 'CGK02';
        END IF;
        RAISE EXCEPTION 'capture of % is outside 1..% (the amount held for charge %)',
          coalesce(p_capture_minor, r.held_minor), r.held_minor, p_key
          USING ERRCODE = 'CGA01';
    END CASE;
  END IF;

  -- The outbox (docs/events.md): a ledger charge's event is written here; a provider charge's by the
  -- deferred trigger charges_state_event (its provider steps change it more than once a transaction).
  -- The row lock this UPDATE took is held to COMMIT, so no other event of the charge is numbered meanwhile.
  IF r.provider IS NULL THEN
    INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data)
    VALUES (ledger_event_id(), r.tenant, 'charge.' || ledger_charge_status(r.hold_state, r.captured_minor, r.refunded_minor, r.provider_state),
            'charge', r.id,
            coalesce((SELECT max(e.object_sequence) FROM events e WHERE e.tenant = r.tenant AND e.object_id = r.id AND e.object_type = 'charge'), 0) + 1,
            jsonb_build_object('object', to_jsonb(r)));
  END IF;

  INSERT INTO transfers (tenant, kind, reference, currency, amount_minor)
  VALUES (p_tenant, 'capture', p_key, r.currency, r.captured_minor)
  RETURNING id INTO v_transfer_id;
  -- The whole hold is released; only the captured part leaves the payer.
  WITH entries AS (
    INSERT INTO journal_entries (transfer_id, tenant, account_id, amount_minor) VALUES
      (v_transfer_id, p_tenant, r.payer_account_id, -r.captured_minor),
      (v_transfer_id, p_tenant, r.payee_account_id, r.captured_minor)
    RETURNING id, account_id, amount_minor
  )
  INSERT INTO pending_postings (tenant, account_id, entry_id, posted_delta_minor, pending_delta_minor)
  SELECT p_tenant, account_id, id, amount_minor, CASE WHEN amount_minor < 0 THEN -r.amount_minor ELSE 0 END
    FROM entries;

  IF v_transfer_id % 16 = 0 THEN
    PERFORM ledger_fold_postings_if_free(p_tenant, r.payer_account_id);
    PERFORM ledger_fold_postings_if_free(p_tenant, r.payee_account_id);
  END IF;
  RETURN r;
END $function$;

CREATE OR REPLACE FUNCTION public.ledger_confirm_batch(p_tenant text[], p_key text[], p_capture_minor bigint[])
 RETURNS SETOF charges
 LANGUAGE plpgsql
AS $function$
DECLARE
  n int := cardinality(p_key);
  i bigint;
  r charges;
BEGIN
  IF n > 64 THEN
    RAISE EXCEPTION 'a Confirm batch holds at most 64 charges, not %', n USING ERRCODE = '54000';
  END IF;
  FOR i IN SELECT u.o FROM unnest(p_tenant, p_key) WITH ORDINALITY AS u (t, k, o) ORDER BY u.t, u.k LOOP
    r := ledger_confirm(p_tenant[i], p_key[i], p_capture_minor[i]);
    RETURN NEXT r;
  END LOOP;
END $function$;

CREATE OR REPLACE FUNCTION public.ledger_deposit(p_tenant text, p_account text, p_amount_minor bigint, p_reference text, p_key_id text)
 RETURNS TABLE(transfer_id bigint, account_id text, amount_minor bigint, currency character, created_at timestamp with time zone, replayed boolean)
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_account accounts;
  v_external text;
  v_transfer transfers;
  v_existing_account text;
BEGIN
  SELECT * INTO v_account FROM accounts WHERE tenant = p_tenant AND id = p_account AND NOT is_system;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'account % does not exist', p_account USING ERRCODE = 'CGN01';
  END IF;
  v_external := '@external/' || v_account.currency;
  INSERT INTO accounts (tenant, id, currency, allow_overdraft, is_system)
  VALUES (p_tenant, v_external, v_account.currency, true, true)
  ON CONFLICT DO NOTHING;

  INSERT INTO transfers (tenant, kind, reference, currency, amount_minor, created_by_key_id)
  VALUES (p_tenant, 'deposit', p_reference, v_account.currency, p_amount_minor, p_key_id)
  ON CONFLICT (tenant, kind, reference) DO NOTHING
  RETURNING * INTO v_transfer;
  IF NOT FOUND THEN
    SELECT t.* INTO STRICT v_transfer FROM transfers t
     WHERE t.tenant = p_tenant AND t.kind = 'deposit' AND t.reference = p_reference;
    SELECT e.account_id INTO v_existing_account FROM journal_entries e
     WHERE e.transfer_id = v_transfer.id AND e.amount_minor > 0;
    IF v_transfer.amount_minor <> p_amount_minor OR v_existing_account <> p_account THEN
      RAISE EXCEPTION 'deposit key % was first used for a different deposit', p_reference USING ERRCODE = 'CGI01';
    END IF;
    RETURN QUERY SELECT v_transfer.id, p_account, v_transfer.amount_minor, v_transfer.currency, v_transfer.created_at, true;
    RETURN;
  END IF;

  PERFORM 1 FROM accounts WHERE tenant = p_tenant AND id IN (p_account, v_external) ORDER BY id FOR UPDATE;
  UPDATE accounts SET posted_minor = posted_minor - p_amount_minor WHERE tenant = p_tenant AND id = v_external;
  UPDATE accounts SET posted_minor = posted_minor + p_amount_minor WHERE tenant = p_tenant AND id = p_account;
  INSERT INTO journal_entries (transfer_id, tenant, account_id, amount_minor) VALUES
    (v_transfer.id, p_tenant, v_external, -p_amount_minor),
    (v_transfer.id, p_tenant, p_account, p_amount_minor);
  RETURN QUERY SELECT v_transfer.id, p_account, v_transfer.amount_minor, v_transfer.currency, v_transfer.created_at, false;
END $function$;

CREATE OR REPLACE FUNCTION public.ledger_deposit_event()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_account text;
BEGIN
  SELECT e.account_id INTO v_account FROM journal_entries e
   WHERE e.transfer_id = NEW.id AND e.amount_minor > 0 LIMIT 1;
  IF v_account IS NULL THEN
    RAISE EXCEPTION 'deposit transfer % credits no account', NEW.id USING ERRCODE = 'CGJ02';
  END IF;
  INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data)
  VALUES (ledger_event_id(), NEW.tenant, 'deposit.credited', 'deposit', 'dep_' || NEW.id, 1,
          jsonb_build_object('object', jsonb_build_object(
            'transfer_id', NEW.id, 'account_id', v_account, 'amount_minor', NEW.amount_minor,
            'currency', NEW.currency, 'created_at', NEW.created_at)));
  RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION public.ledger_event_id()
 RETURNS text
 LANGUAGE sql
 PARALLEL SAFE
AS $function$
  SELECT 'evt_' || replace(gen_random_uuid()::text, '-', '')
$function$;

CREATE OR REPLACE FUNCTION public.ledger_fold_postings(p_tenant text, p_account text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_posted bigint;
  v_pending bigint;
BEGIN
  PERFORM 1 FROM accounts WHERE tenant = p_tenant AND id = p_account FOR NO KEY UPDATE;
  WITH folded AS (
    DELETE FROM pending_postings WHERE tenant = p_tenant AND account_id = p_account
    RETURNING posted_delta_minor, pending_delta_minor
  )
  SELECT sum(posted_delta_minor), sum(pending_delta_minor) INTO v_posted, v_pending FROM folded;
  IF v_posted IS NOT NULL THEN
    UPDATE accounts SET posted_minor = posted_minor + v_posted, pending_minor = pending_minor + v_pending
     WHERE tenant = p_tenant AND id = p_account;
  END IF;
END $function$;

CREATE OR REPLACE FUNCTION public.ledger_fold_postings_if_free(p_tenant text, p_account text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
  PERFORM 1 FROM accounts WHERE tenant = p_tenant AND id = p_account FOR NO KEY UPDATE SKIP LOCKED;
  IF FOUND THEN
    PERFORM ledger_fold_postings(p_tenant, p_account);
  END IF;
END $function$;

CREATE OR REPLACE FUNCTION public.ledger_key_refusal(p_tenant text, p_key_id text, k api_keys, p_roles text[])
 RETURNS text
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
  IF p_key_id IS NULL THEN
    IF EXISTS (SELECT 1 FROM api_keys WHERE tenant = p_tenant) THEN
      RETURN 'key_not_authorized';
    END IF;
    RETURN NULL;
  END IF;
  IF k.id IS DISTINCT FROM p_key_id OR k.tenant <> p_tenant OR NOT (k.role = ANY (p_roles))
     OR k.revoked_at IS NOT NULL OR k.expires_at <= now() THEN
    RETURN 'key_not_authorized';
  END IF;
  RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION public.ledger_provider_authorize_begin(p_tenant text, p_key text)
 RETURNS charges
 LANGUAGE plpgsql
AS $function$
DECLARE
  r charges;
BEGIN
  SELECT * INTO r FROM charges WHERE tenant = p_tenant AND idempotency_key = p_key FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'charge % was never tried; nothing to authorize', p_key USING ERRCODE = 'CGH02';
  END IF;
  -- Cancelled first: a tombstone left before Try carries no provider columns, and is still the record
  -- that authorize must never be sent.
  IF r.hold_state = 'CANCELLED' THEN
    RAISE EXCEPTION 'charge % was cancelled; authorize will not be sent', p_key USING ERRCODE = 'CGH01';
  END IF;
  IF r.provider IS NULL THEN
    RAISE EXCEPTION 'charge % is not a provider charge', p_key USING ERRCODE = 'CGP02';
  END IF;
  IF r.hold_state = 'TRIED' AND r.provider_state IS NULL THEN
    UPDATE charges SET provider_state = 'authorizing', provider_authorize_sent_at = now(), updated_at = now()
     WHERE tenant = p_tenant AND idempotency_key = p_key
     RETURNING * INTO STRICT r;
  END IF;
  RETURN r; -- DECLINED, CONFIRMED, or a hold whose authorize was already sent or answered
END $function$;

CREATE OR REPLACE FUNCTION public.ledger_provider_authorized(p_tenant text, p_key text, p_payment_id text, p_state text, p_next_action jsonb)
 RETURNS charges
 LANGUAGE plpgsql
AS $function$
DECLARE
  r charges;
BEGIN
  IF p_state NOT IN ('authorized', 'requires_action') THEN
    RAISE EXCEPTION 'ledger_provider_authorized records authorized or requires_action, not %', p_state
      USING ERRCODE = '22023';
  END IF;
  SELECT * INTO r FROM charges WHERE tenant = p_tenant AND idempotency_key = p_key FOR UPDATE;
  IF NOT FOUND OR r.provider IS NULL THEN
    RAISE EXCEPTION 'charge % is not a provider charge the ledger knows', p_key USING ERRCODE = 'CGP02';
  END IF;
  IF r.provider_payment_id IS NOT NULL AND r.provider_payment_id <> p_payment_id THEN
    RAISE EXCEPTION 'charge % already has provider payment %; % is a duplicate', p_key, r.provider_payment_id, p_payment_id
      USING ERRCODE = 'CGP01';
  END IF;

  IF r.hold_state = 'TRIED' AND r.provider_state IN ('authorizing', 'requires_action') THEN
    UPDATE charges SET provider_payment_id = p_payment_id, provider_state = p_state,
                       provider_next_action = CASE WHEN p_state = 'requires_action' THEN p_next_action END,
                       updated_at = now()
     WHERE tenant = p_tenant AND idempotency_key = p_key
     RETURNING * INTO STRICT r;
  ELSIF r.provider_payment_id IS NULL THEN
    -- Cancelled (or decided) meanwhile: keep the id for the void, change nothing else.
    UPDATE charges SET provider_payment_id = p_payment_id, updated_at = now()
     WHERE tenant = p_tenant AND idempotency_key = p_key
     RETURNING * INTO STRICT r;
  END IF;
  RETURN r;
END $function$;

CREATE OR REPLACE FUNCTION public.ledger_provider_capture_begin(p_tenant text, p_key text)
 RETURNS charges
 LANGUAGE plpgsql
AS $function$
DECLARE
  r charges;
BEGIN
  SELECT * INTO r FROM charges WHERE tenant = p_tenant AND idempotency_key = p_key FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'charge % was never tried; nothing to capture', p_key USING ERRCODE = 'CGH02';
  END IF;
  CASE r.hold_state
    WHEN 'CONFIRMED' THEN RETURN r;
    WHEN 'CANCELLED' THEN
      RAISE EXCEPTION 'charge % was cancelled; it can no longer be captured', p_key USING ERRCODE = 'CGH01';
    WHEN 'DECLINED' THEN
      RAISE EXCEPTION 'charge % was declined (%); nothing to capture', p_key, r.decline_code USING ERRCODE = 'CGH03';
    ELSE NULL;
  END CASE;
  IF r.provider_state IS DISTINCT FROM 'authorized' OR r.provider_payment_id IS NULL THEN
    RAISE EXCEPTION 'charge % is not authorized at its provider (state %); nothing to capture', p_key, r.provider_state
      USING ERRCODE = 'CGP02';
  END IF;
  IF r.provider_capture_sent_at IS NULL THEN
    UPDATE charges SET provider_capture_sent_at = now(), updated_at = now()
     WHERE tenant = p_tenant AND idempotency_key = p_key
     RETURNING * INTO STRICT r;
  END IF;
  RETURN r;
END $function$;

CREATE OR REPLACE FUNCTION public.ledger_provider_capture_refused(p_tenant text, p_key text, p_state text)
 RETURNS charges
 LANGUAGE plpgsql
AS $function$
DECLARE
  r charges;
BEGIN
  UPDATE charges SET provider_capture_sent_at = NULL, provider_state = coalesce(p_state, provider_state),
                     updated_at = now()
   WHERE tenant = p_tenant AND idempotency_key = p_key AND hold_state = 'TRIED' AND provider IS NOT NULL
  RETURNING * INTO r;
  IF NOT FOUND THEN
    SELECT * INTO STRICT r FROM charges WHERE tenant = p_tenant AND idempotency_key = p_key;
  END IF;
  RETURN r;
END $function$;

CREATE OR REPLACE FUNCTION public.ledger_provider_confirm(p_tenant text, p_key text, p_captured_minor bigint)
 RETURNS charges
 LANGUAGE plpgsql
AS $function$
DECLARE
  r charges;
BEGIN
  SELECT * INTO r FROM ledger_confirm(p_tenant, p_key, p_captured_minor);
  IF r.provider IS NULL THEN
    RAISE EXCEPTION 'charge % is not a provider charge', p_key USING ERRCODE = 'CGP02';
  END IF;
  IF r.provider_state IS DISTINCT FROM 'captured' THEN
    UPDATE charges SET provider_state = 'captured', provider_capture_sent_at = coalesce(provider_capture_sent_at, now()),
                       updated_at = now()
     WHERE tenant = p_tenant AND idempotency_key = p_key
     RETURNING * INTO STRICT r;
  END IF;
  RETURN r;
END $function$;

CREATE OR REPLACE FUNCTION public.ledger_provider_declined(p_tenant text, p_key text, p_payment_id text, p_decline_code text, p_provider_decline_code text)
 RETURNS charges
 LANGUAGE plpgsql
AS $function$
DECLARE
  r charges;
BEGIN
  SELECT * INTO r FROM charges WHERE tenant = p_tenant AND idempotency_key = p_key FOR UPDATE;
  IF NOT FOUND OR r.provider IS NULL THEN
    RAISE EXCEPTION 'charge % is not a provider charge the ledger knows', p_key USING ERRCODE = 'CGP02';
  END IF;
  IF r.provider_payment_id IS NOT NULL AND p_payment_id IS NOT NULL AND r.provider_payment_id <> p_payment_id THEN
    RAISE EXCEPTION 'charge % already has provider payment %; % is a duplicate', p_key, r.provider_payment_id, p_payment_id
      USING ERRCODE = 'CGP01';
  END IF;
  IF r.hold_state <> 'TRIED' OR r.provider_state NOT IN ('authorizing', 'requires_action') THEN
    RETURN r;
  END IF;

  UPDATE accounts SET pending_minor = pending_minor - r.held_minor
   WHERE tenant = p_tenant AND id = r.payer_account_id;
  UPDATE charges SET hold_state = 'DECLINED', held_minor = 0, hold_expires_at = NULL,
                     decline_code = p_decline_code, provider_state = 'declined',
                     provider_decline_code = p_provider_decline_code,
                     provider_payment_id = coalesce(provider_payment_id, p_payment_id),
                     provider_next_action = NULL, updated_at = now()
   WHERE tenant = p_tenant AND idempotency_key = p_key
   RETURNING * INTO STRICT r;
  RETURN r;
END $function$;

CREATE OR REPLACE FUNCTION public.ledger_provider_try(p_tenant text, p_key text, p_charge_id text, p_fingerprint text, p_order_id text, p_provider text, p_payment_method text, p_payee text, p_currency text, p_amount_minor bigint, p_capture_mode text, p_description text, p_metadata jsonb, p_hold_ttl_ms bigint, p_key_id text)
 RETURNS charges
 LANGUAGE plpgsql
AS $function$
DECLARE
  r charges;
  v_key api_keys;
  v_payee accounts;
  v_clearing text := '@provider/' || p_provider || '/' || p_currency;
  v_decline text;
BEGIN
  INSERT INTO charges (tenant, idempotency_key, id, fingerprint, order_id, payer_account_id,
                       payee_account_id, currency, amount_minor, capture_mode, description, metadata,
                       hold_state, held_minor, hold_expires_at, created_by_key_id,
                       provider, payment_method)
  VALUES (p_tenant, p_key, p_charge_id, p_fingerprint, p_order_id, v_clearing, p_payee, p_currency,
          p_amount_minor, p_capture_mode, p_description, p_metadata, 'TRIED', p_amount_minor,
          CASE WHEN p_capture_mode = 'manual' THEN now() + p_hold_ttl_ms * interval '1 millisecond' END,
          p_key_id, p_provider, p_payment_method)
  ON CONFLICT DO NOTHING
  RETURNING * INTO r;

  IF NOT FOUND THEN
    SELECT * INTO STRICT r FROM charges WHERE tenant = p_tenant AND idempotency_key = p_key;
    IF r.fingerprint <> p_fingerprint THEN
      RAISE EXCEPTION 'idempotency key % was first used for a different request', p_key
        USING ERRCODE = 'CGI01';
    END IF;
    IF r.hold_state = 'CANCELLED' THEN
      RAISE EXCEPTION 'charge % was cancelled before this Try; it will not reserve', p_key
        USING ERRCODE = 'CGH01';
    END IF;
    RETURN r;
  END IF;

  IF p_amount_minor > ledger_amount_minor_max() THEN
    v_decline := 'amount_too_large';
  ELSE
    IF p_key_id IS NOT NULL THEN
      SELECT * INTO v_key FROM api_keys WHERE id = p_key_id;
    END IF;
    v_decline := ledger_key_refusal(p_tenant, p_key_id, v_key, ARRAY['agent', 'admin']);
    IF v_decline IS NULL AND p_key_id IS NOT NULL AND (
         p_amount_minor > v_key.max_amount_minor OR p_amount_minor > v_key.daily_limit_minor
         OR p_currency <> v_key.currency OR p_payee <> ALL (v_key.allowed_payee_account_ids)) THEN
      v_decline := 'mandate_exceeded';
    END IF;
  END IF;

  IF v_decline IS NULL AND v_key.daily_limit_minor IS NOT NULL THEN
    PERFORM pg_advisory_xact_lock(hashtextextended('ledger_try mandate ' || p_key_id, 0));
    IF (SELECT coalesce(sum(c.held_minor + c.captured_minor), 0) FROM charges c
         WHERE c.created_by_key_id = p_key_id AND c.created_at > now() - interval '24 hours'
           AND c.id <> p_charge_id)
       + p_amount_minor > v_key.daily_limit_minor THEN
      v_decline := 'mandate_exceeded';
    END IF;
  END IF;

  IF v_decline IS NULL THEN
    SELECT * INTO v_payee FROM accounts WHERE tenant = p_tenant AND id = p_payee;
    v_decline := CASE
      WHEN v_payee.id IS NULL OR v_payee.is_system THEN 'unknown_account'
      WHEN v_payee.currency <> p_currency THEN 'currency_mismatch'
      WHEN v_payee.frozen THEN 'account_frozen'
    END;
  END IF;

  IF v_decline IS NULL THEN
    INSERT INTO accounts (tenant, id, currency, allow_overdraft, is_system)
    VALUES (p_tenant, v_clearing, p_currency, true, true)
    ON CONFLICT DO NOTHING;
    UPDATE accounts SET pending_minor = pending_minor + p_amount_minor
     WHERE tenant = p_tenant AND id = v_clearing AND is_system AND allow_overdraft AND currency = p_currency;
    IF NOT FOUND THEN
      -- Someone made an ordinary account under the clearing account's name: never reserve on it.
      v_decline := 'unknown_account';
    ELSE
      RETURN r;
    END IF;
  END IF;

  UPDATE charges SET hold_state = 'DECLINED', held_minor = 0, hold_expires_at = NULL,
                     decline_code = v_decline, updated_at = now()
   WHERE tenant = p_tenant AND idempotency_key = p_key
   RETURNING * INTO STRICT r;
  RETURN r;
END $function$;

CREATE OR REPLACE FUNCTION public.ledger_provider_voided(p_tenant text, p_key text, p_payment_id text)
 RETURNS charges
 LANGUAGE plpgsql
AS $function$
DECLARE
  r charges;
BEGIN
  UPDATE charges SET provider_state = 'voided', provider_next_action = NULL,
                     provider_payment_id = coalesce(provider_payment_id, p_payment_id), updated_at = now()
   WHERE tenant = p_tenant AND idempotency_key = p_key AND provider IS NOT NULL
     AND hold_state = 'CANCELLED' AND provider_state IS DISTINCT FROM 'voided'
     AND (p_payment_id IS NULL OR provider_payment_id IS NULL OR provider_payment_id = p_payment_id)
  RETURNING * INTO r;
  IF NOT FOUND THEN
    SELECT * INTO STRICT r FROM charges WHERE tenant = p_tenant AND idempotency_key = p_key;
  END IF;
  RETURN r;
END $function$;

CREATE OR REPLACE FUNCTION public.ledger_refund(p_tenant text, p_charge_key text, p_refund_key text, p_refund_id text, p_fingerprint text, p_amount_minor bigint, p_key_id text)
 RETURNS refunds
 LANGUAGE plpgsql
AS $function$
DECLARE
  c charges;
  r refunds;
  v_key api_keys;
  v_amount bigint;
  v_failure text;
  v_transfer_id bigint;
BEGIN
  SELECT * INTO c FROM charges WHERE tenant = p_tenant AND idempotency_key = p_charge_key FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'charge % does not exist', p_charge_key USING ERRCODE = 'CGN02';
  END IF;

  SELECT * INTO r FROM refunds
   WHERE tenant = p_tenant AND charge_key = p_charge_key AND refund_key = p_refund_key;
  IF FOUND THEN
    IF r.fingerprint <> p_fingerprint THEN
      RAISE EXCEPTION 'refund key % was first used for a different refund of charge %', p_refund_key, p_charge_key
        USING ERRCODE = 'CGI01';
    END IF;
    RETURN r; -- the first decision, whatever happened to the charge since
  END IF;

  IF p_key_id IS NOT NULL THEN
    SELECT * INTO v_key FROM api_keys WHERE id = p_key_id;
  END IF;
  IF ledger_key_refusal(p_tenant, p_key_id, v_key, ARRAY['agent', 'admin']) IS NOT NULL THEN
    RAISE EXCEPTION 'the acting key % may not refund charges of tenant %', coalesce(p_key_id, '(none)'), p_tenant
      USING ERRCODE = 'CGK01';
  END IF;

  IF c.hold_state <> 'CONFIRMED' THEN
    RAISE EXCEPTION 'charge % is %, not captured; only a captured charge can be refunded', p_charge_key, c.hold_state
      USING ERRCODE = 'CGR01';
  END IF;

  v_amount := coalesce(p_amount_minor, c.captured_minor - c.refunded_minor);
  IF v_amount < 1 OR c.refunded_minor + v_amount > c.captured_minor OR v_amount > ledger_amount_minor_max() THEN
    v_failure := 'exceeds_refundable';
  ELSE
    PERFORM 1 FROM accounts
     WHERE tenant = p_tenant AND id IN (c.payer_account_id, c.payee_account_id)
     ORDER BY id FOR NO KEY UPDATE;
    PERFORM ledger_fold_postings(p_tenant, c.payee_account_id);
    -- The refund comes out of the payee's available money, never out of funds it holds for
    -- others: the same rule as the accounts CHECK, asked first so it is a decision, not an error.
    UPDATE accounts SET posted_minor = posted_minor - v_amount
     WHERE tenant = p_tenant AND id = c.payee_account_id
       AND (allow_overdraft OR posted_minor - pending_minor >= v_amount);
    IF NOT FOUND THEN
      v_failure := 'insufficient_funds';
    END IF;
  END IF;

  IF v_failure IS NULL THEN
    -- The conditional write is the guard the decision above rests on; with the row locked it
    -- always matches, and if it ever did not, the whole refund rolls back as a system fault.
    UPDATE charges SET refunded_minor = refunded_minor + v_amount, updated_at = now()
     WHERE tenant = p_tenant AND idempotency_key = p_charge_key
       AND hold_state = 'CONFIRMED' AND refunded_minor + v_amount <= captured_minor;
    IF NOT FOUND THEN
      RAISE EXCEPTION 'refund of % on charge % would exceed its capture', v_amount, p_charge_key;
    END IF;
    UPDATE accounts SET posted_minor = posted_minor + v_amount
     WHERE tenant = p_tenant AND id = c.payer_account_id;

    INSERT INTO transfers (tenant, kind, reference, currency, amount_minor)
    VALUES (p_tenant, 'refund', ledger_refund_reference(p_charge_key, p_refund_key), c.currency, v_amount)
    RETURNING id INTO v_transfer_id;
    INSERT INTO journal_entries (transfer_id, tenant, account_id, amount_minor) VALUES
      (v_transfer_id, p_tenant, c.payee_account_id, -v_amount),
      (v_transfer_id, p_tenant, c.payer_account_id, v_amount);
  END IF;

  INSERT INTO refunds (tenant, charge_key, refund_key, id, charge_id, currency, fingerprint,
                       requested_minor, amount_minor, status, failure_code, transfer_id, created_by_key_id)
  VALUES (p_tenant, p_charge_key, p_refund_key, p_refund_id, c.id, c.currency, p_fingerprint,
          p_amount_minor, v_amount, CASE WHEN v_failure IS NULL THEN 'succeeded' ELSE 'failed' END,
          v_failure, v_transfer_id, p_key_id)
  RETURNING * INTO r;
  RETURN r;
END $function$;

CREATE OR REPLACE FUNCTION public.ledger_refund_event()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data)
  VALUES (ledger_event_id(), NEW.tenant, 'refund.' || NEW.status, 'refund', NEW.id,
          coalesce((SELECT max(e.object_sequence) FROM events e
                     WHERE e.tenant = NEW.tenant AND e.object_id = NEW.id AND e.object_type = 'refund'), 0) + 1,
          jsonb_build_object('object', to_jsonb(NEW)));
  RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION public.ledger_refund_provider_refunded(p_tenant text, p_charge_key text, p_refund_key text, p_provider_refund_id text)
 RETURNS refunds
 LANGUAGE plpgsql
AS $function$
DECLARE
  r refunds;
BEGIN
  UPDATE refunds SET provider_refund_id = p_provider_refund_id, provider_refunded_at = now()
   WHERE tenant = p_tenant AND charge_key = p_charge_key AND refund_key = p_refund_key
     AND status = 'succeeded' AND provider_refund_id IS NULL
     AND EXISTS (SELECT 1 FROM charges c
                  WHERE c.tenant = p_tenant AND c.idempotency_key = p_charge_key AND c.provider IS NOT NULL)
  RETURNING * INTO r;
  IF FOUND THEN
    RETURN r;
  END IF;
  SELECT * INTO r FROM refunds WHERE tenant = p_tenant AND charge_key = p_charge_key AND refund_key = p_refund_key;
  IF r.provider_refund_id = p_provider_refund_id THEN
    RETURN r;
  END IF;
  IF r.provider_refund_id IS NOT NULL THEN
    RAISE EXCEPTION 'refund % of charge % is already recorded as provider refund %, not %',
      p_refund_key, p_charge_key, r.provider_refund_id, p_provider_refund_id USING ERRCODE = 'CGP01';
  END IF;
  RAISE EXCEPTION 'refund % of charge % is not a succeeded refund of a provider charge', p_refund_key, p_charge_key
    USING ERRCODE = 'CGP02';
END $function$;

CREATE OR REPLACE FUNCTION public.ledger_refund_provider_rejected(p_tenant text, p_charge_key text, p_refund_key text, p_failure text)
 RETURNS refunds
 LANGUAGE plpgsql
AS $function$
DECLARE
  r refunds;
BEGIN
  UPDATE refunds SET provider_refund_failure = p_failure
   WHERE tenant = p_tenant AND charge_key = p_charge_key AND refund_key = p_refund_key
     AND status = 'succeeded' AND provider_refund_id IS NULL AND provider_refund_failure IS NULL
     AND EXISTS (SELECT 1 FROM charges c
                  WHERE c.tenant = p_tenant AND c.idempotency_key = p_charge_key AND c.provider IS NOT NULL)
  RETURNING * INTO r;
  IF FOUND THEN
    RETURN r;
  END IF;
  SELECT * INTO r FROM refunds WHERE tenant = p_tenant AND charge_key = p_charge_key AND refund_key = p_refund_key;
  IF r.provider_refund_id IS NOT NULL OR r.provider_refund_failure IS NOT NULL THEN
    RETURN r;
  END IF;
  RAISE EXCEPTION 'refund % of charge % is not a succeeded refund of a provider charge', p_refund_key, p_charge_key
    USING ERRCODE = 'CGP02';
END $function$;

CREATE OR REPLACE FUNCTION public.ledger_refund_reference(p_charge_key text, p_refund_key text)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE STRICT
AS $function$
  SELECT replace(replace(p_charge_key, '%', '%25'), '/', '%2F') || '/' || p_refund_key
$function$;

CREATE OR REPLACE FUNCTION public.ledger_refuse_change()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP USING ERRCODE = 'CGJ01';
END $function$;

CREATE OR REPLACE FUNCTION public.ledger_refuse_unknown_provider()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  RAISE EXCEPTION 'provider % is not one this ledger knows (stripe)', NEW.provider
    USING ERRCODE = 'check_violation', COLUMN = 'provider', TABLE = 'charges';
END $function$;

CREATE OR REPLACE FUNCTION public.ledger_try(p_tenant text, p_key text, p_charge_id text, p_fingerprint text, p_order_id text, p_payer text, p_payee text, p_currency text, p_amount_minor bigint, p_capture_mode text, p_description text, p_metadata jsonb, p_hold_ttl_ms bigint, p_key_id text, p_daily_limit_minor bigint)
 RETURNS charges
 LANGUAGE plpgsql
AS $function$
DECLARE
  r charges;
  v_key api_keys;
  v_payer accounts;
  v_payee accounts;
  v_decline text;
BEGIN
  -- Claim the key. A concurrent Try of the same key waits here on the unique index and then
  -- finds the row; it never reserves a second time.
  INSERT INTO charges (tenant, idempotency_key, id, fingerprint, order_id, payer_account_id,
                       payee_account_id, currency, amount_minor, capture_mode, description, metadata,
                       hold_state, held_minor, hold_expires_at, created_by_key_id)
  VALUES (p_tenant, p_key, p_charge_id, p_fingerprint, p_order_id, p_payer, p_payee, p_currency,
          p_amount_minor, p_capture_mode, p_description, p_metadata, 'TRIED', p_amount_minor,
          CASE WHEN p_capture_mode = 'manual' THEN now() + p_hold_ttl_ms * interval '1 millisecond' END,
          p_key_id)
  ON CONFLICT DO NOTHING
  RETURNING * INTO r;

  IF NOT FOUND THEN
    SELECT * INTO STRICT r FROM charges WHERE tenant = p_tenant AND idempotency_key = p_key;
    IF r.fingerprint <> p_fingerprint THEN
      RAISE EXCEPTION 'idempotency key % was first used for a different request', p_key
        USING ERRCODE = 'CGI01';
    END IF;
    IF r.hold_state = 'CANCELLED' THEN
      -- Anti-hanging: a Try that arrives after Cancel must never reserve.
      RAISE EXCEPTION 'charge % was cancelled before this Try; it will not reserve', p_key
        USING ERRCODE = 'CGH01';
    END IF;
    RETURN r; -- DECLINED, TRIED, CONFIRMED: the same answer as the first time
  END IF;

  -- The acting key: ledger_key_refusal's rule, written out here to spare every Try a nested
  -- plpgsql call (docs/back-door.md, the cost); ledger_refund calls the function.
  IF p_amount_minor > ledger_amount_minor_max() THEN
    v_decline := 'amount_too_large';
  ELSIF p_key_id IS NULL THEN
    IF EXISTS (SELECT 1 FROM api_keys WHERE tenant = p_tenant) THEN
      v_decline := 'key_not_authorized';
    END IF;
  ELSE
    SELECT * INTO v_key FROM api_keys WHERE id = p_key_id;
    v_decline := CASE
      WHEN v_key.id IS NULL OR v_key.tenant <> p_tenant OR v_key.role NOT IN ('agent', 'admin')
        OR v_key.revoked_at IS NOT NULL OR v_key.expires_at <= now() THEN 'key_not_authorized'
      WHEN p_amount_minor > v_key.max_amount_minor OR p_amount_minor > v_key.daily_limit_minor
        OR p_currency <> v_key.currency OR p_payee <> ALL (v_key.allowed_payee_account_ids) THEN 'mandate_exceeded'
    END;
  END IF;

  IF v_decline IS NULL AND v_key.daily_limit_minor IS NOT NULL THEN
    PERFORM pg_advisory_xact_lock(hashtextextended('ledger_try mandate ' || p_key_id, 0));
    -- Held (TRIED) or captured (CONFIRMED) money; declined and cancelled charges count zero.
    IF (SELECT coalesce(sum(c.held_minor + c.captured_minor), 0) FROM charges c
         WHERE c.created_by_key_id = p_key_id AND c.created_at > now() - interval '24 hours'
           AND c.id <> p_charge_id)
       + p_amount_minor > v_key.daily_limit_minor THEN
      v_decline := 'mandate_exceeded';
    END IF;
  END IF;

  IF v_decline IS NULL THEN
    -- The common case in one statement: both accounts ordinary and usable and the row's balance
    -- enough. Only the payer's row is locked (UPDATE ... FROM does not lock the payee).
    UPDATE accounts p SET pending_minor = p.pending_minor + p_amount_minor
      FROM accounts q
     WHERE p.tenant = p_tenant AND p.id = p_payer AND q.tenant = p_tenant AND q.id = p_payee
       AND NOT p.is_system AND NOT q.is_system
       AND p.currency = p_currency AND q.currency = p_currency AND NOT p.frozen AND NOT q.frozen
       AND (p.allow_overdraft OR p.posted_minor - p.pending_minor >= p_amount_minor);
    IF FOUND THEN
      -- The outbox (docs/events.md): the row was claimed by this call, so this is its first event.
      INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data)
      VALUES (ledger_event_id(), r.tenant, 'charge.reserved', 'charge', r.id, 1, jsonb_build_object('object', to_jsonb(r)));
      RETURN r;
    END IF;

    -- Otherwise find out why; funds are judged only after folding the payer's postings.
    SELECT * INTO v_payee FROM accounts WHERE tenant = p_tenant AND id = p_payee;
    SELECT * INTO v_payer FROM accounts WHERE tenant = p_tenant AND id = p_payer;
    v_decline := CASE
      WHEN v_payer.id IS NULL OR v_payee.id IS NULL OR v_payer.is_system OR v_payee.is_system THEN 'unknown_account'
      WHEN v_payer.currency <> p_currency OR v_payee.currency <> p_currency THEN 'currency_mismatch'
      WHEN v_payer.frozen OR v_payee.frozen THEN 'account_frozen'
    END;
  END IF;

  IF v_decline IS NULL THEN
    PERFORM ledger_fold_postings(p_tenant, p_payer);
    UPDATE accounts SET pending_minor = pending_minor + p_amount_minor
     WHERE tenant = p_tenant AND id = p_payer
       AND NOT frozen
       AND (allow_overdraft OR posted_minor - pending_minor >= p_amount_minor);
    IF NOT FOUND THEN
      v_decline := 'insufficient_funds';
    END IF;
  END IF;

  IF v_decline IS NOT NULL THEN
    UPDATE charges SET hold_state = 'DECLINED', held_minor = 0, hold_expires_at = NULL,
                       decline_code = v_decline, updated_at = now()
     WHERE tenant = p_tenant AND idempotency_key = p_key
     RETURNING * INTO STRICT r;
  END IF;
  -- One event for the decision, never the TRIED row claimed on the way to a decline.
  INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data)
  VALUES (ledger_event_id(), r.tenant, 'charge.' || ledger_charge_status(r.hold_state, r.captured_minor, r.refunded_minor, r.provider_state),
          'charge', r.id, 1, jsonb_build_object('object', to_jsonb(r)));
  RETURN r;
END $function$;

CREATE OR REPLACE FUNCTION public.ledger_try_batch(p_tenant text[], p_key text[], p_charge_id text[], p_fingerprint text[], p_order_id text[], p_payer text[], p_payee text[], p_currency text[], p_amount_minor bigint[], p_capture_mode text[], p_description text[], p_metadata text[], p_hold_ttl_ms bigint[], p_key_id text[], p_daily_limit_minor bigint[])
 RETURNS SETOF charges
 LANGUAGE plpgsql
AS $function$
DECLARE
  n int := cardinality(p_key);
  i bigint;
  r charges;
BEGIN
  IF n > 64 THEN
    RAISE EXCEPTION 'a Try batch holds at most 64 charges, not %', n USING ERRCODE = '54000';
  END IF;
  FOR i IN SELECT u.o FROM unnest(p_tenant, p_payer, p_key) WITH ORDINALITY AS u (t, p, k, o) ORDER BY u.t, u.p, u.k LOOP
    r := ledger_try(p_tenant[i], p_key[i], p_charge_id[i], p_fingerprint[i], p_order_id[i], p_payer[i], p_payee[i],
                    p_currency[i], p_amount_minor[i], p_capture_mode[i], p_description[i], p_metadata[i]::jsonb,
                    p_hold_ttl_ms[i], p_key_id[i], p_daily_limit_minor[i]);
    RETURN NEXT r;
  END LOOP;
END $function$;

CREATE OR REPLACE FUNCTION public.webhook_cursor_batches_recorded(p_owner text, p_batch_endpoint_id text[], p_batch_from_xact xid8[], p_batch_from_seq bigint[], p_batch_to_xact xid8[], p_batch_to_seq bigint[], p_endpoint_id text[], p_event_id text[], p_started_at timestamp with time zone[], p_duration_ms integer[], p_status_code integer[], p_error text[], p_delivered boolean[], p_retry_at timestamp with time zone[])
 RETURNS TABLE(endpoint_id text)
 LANGUAGE plpgsql
AS $function$
#variable_conflict use_column
BEGIN
  PERFORM set_config('synchronous_commit', 'off', true);
  RETURN QUERY
  WITH batch AS (
    SELECT b.endpoint_id, b.from_xact, b.from_seq, b.to_xact, b.to_seq,
           coalesce((SELECT bool_or(a.delivered) FROM unnest(p_endpoint_id, p_delivered) AS a (endpoint_id, delivered)
                      WHERE a.endpoint_id = b.endpoint_id), false) AS any_delivered
      FROM unnest(p_batch_endpoint_id, p_batch_from_xact, p_batch_from_seq, p_batch_to_xact, p_batch_to_seq)
           AS b (endpoint_id, from_xact, from_seq, to_xact, to_seq)),
  held AS (
    UPDATE webhook_endpoints e
       SET cursor_xact = b.to_xact, cursor_seq = b.to_seq,
           failing_since = CASE WHEN b.any_delivered THEN NULL ELSE e.failing_since END,
           cursor_owner = NULL, cursor_lease_expires_at = NULL, cursor_slots = 0
      FROM batch b
     WHERE e.id = b.endpoint_id AND e.cursor_owner = p_owner AND e.cursor_xact = b.from_xact AND e.cursor_seq = b.from_seq
    RETURNING e.id, e.tenant),
  attempted AS (
    SELECT a.*, held.tenant
      FROM unnest(p_endpoint_id, p_event_id, p_started_at, p_duration_ms, p_status_code, p_error, p_delivered, p_retry_at)
           AS a (endpoint_id, event_id, started_at, duration_ms, status_code, error, delivered, retry_at)
      JOIN held ON held.id = a.endpoint_id),
  made AS (
    INSERT INTO webhook_deliveries (endpoint_id, event_id, tenant, state, attempts, next_attempt_at, finished_at)
    SELECT a.endpoint_id, a.event_id, a.tenant,
           CASE WHEN a.delivered THEN 'delivered' WHEN a.retry_at IS NULL THEN 'failed' ELSE 'pending' END,
           1, coalesce(a.retry_at, now()),
           CASE WHEN a.delivered OR a.retry_at IS NULL THEN now() END
      FROM attempted a
    -- Never expected (a position is passed once), but a row already there must not stop the cursor.
    ON CONFLICT (endpoint_id, event_id) WHERE NOT requested DO NOTHING
    RETURNING id, endpoint_id, event_id),
  attempts AS (
    INSERT INTO webhook_delivery_attempts (delivery_id, endpoint_id, event_id, attempt, started_at, duration_ms, status_code, error, delivered)
    SELECT m.id, a.endpoint_id, a.event_id, 1, a.started_at, a.duration_ms, a.status_code, left(a.error, 500), a.delivered
      FROM made m JOIN attempted a ON a.endpoint_id = m.endpoint_id AND a.event_id = m.event_id)
  SELECT held.id FROM held;
  -- A batch whose cursor moved without it: its lease (and the slots it counts) ends now all the same.
  UPDATE webhook_endpoints e SET cursor_owner = NULL, cursor_lease_expires_at = NULL, cursor_slots = 0
   WHERE e.id = ANY (p_batch_endpoint_id) AND e.cursor_owner = p_owner;
END
$function$;

CREATE OR REPLACE FUNCTION public.webhook_deliveries_claim(p_owner text, p_lease_ms integer, p_per_endpoint_max integer, p_max integer, p_tenants text[])
 RETURNS TABLE(id bigint, endpoint_id text, tenant text, url text, attempts integer, created_at timestamp with time zone, event_seq bigint, event_id text, event_type text, event_object_type text, event_object_id text, event_object_sequence integer, event_data jsonb, event_created_at timestamp with time zone, secrets text[])
 LANGUAGE plpgsql
AS $function$
#variable_conflict use_column
BEGIN
  IF p_max <= 0 THEN
    RETURN;
  END IF;
  PERFORM set_config('synchronous_commit', 'off', true);
  PERFORM pg_advisory_xact_lock(hashtextextended('webhook_deliveries:claim', 0));
  -- Each enabled endpoint's due rows, at most its free slots, read through the (endpoint, due
  -- time) index: a backlog of one endpoint costs this statement nothing beyond that endpoint's few
  -- rows, and never hides another endpoint's.
  RETURN QUERY
  WITH chosen AS (
    SELECT c.id FROM webhook_endpoints e
     CROSS JOIN LATERAL (
       SELECT count(*) AS n FROM webhook_deliveries l
        WHERE l.endpoint_id = e.id AND l.lease_expires_at IS NOT NULL AND l.lease_expires_at > now() AND l.state = 'pending') busy
     CROSS JOIN LATERAL (
       SELECT d.id, d.next_attempt_at FROM webhook_deliveries d
        WHERE d.endpoint_id = e.id AND d.state = 'pending' AND d.next_attempt_at <= now()
          AND (d.lease_expires_at IS NULL OR d.lease_expires_at <= now())
        ORDER BY d.next_attempt_at, d.id
        LIMIT greatest(p_per_endpoint_max - busy.n - CASE WHEN e.cursor_lease_expires_at > now() THEN e.cursor_slots ELSE 0 END, 0)) c
     WHERE e.disabled_at IS NULL AND (p_tenants IS NULL OR e.tenant = ANY (p_tenants))
     ORDER BY c.next_attempt_at, c.id LIMIT p_max),
  locked AS (SELECT w.id FROM webhook_deliveries w WHERE w.id IN (SELECT chosen.id FROM chosen) FOR UPDATE SKIP LOCKED),
  claimed AS (
    UPDATE webhook_deliveries d
       SET lease_owner = p_owner, lease_expires_at = now() + p_lease_ms * interval '1 millisecond', attempts = d.attempts + 1
      FROM locked, webhook_endpoints e
     WHERE d.id = locked.id AND e.id = d.endpoint_id
    RETURNING d.id, d.endpoint_id, d.tenant, e.url, d.attempts, d.created_at, d.event_id)
  SELECT c.id, c.endpoint_id, c.tenant, c.url, c.attempts, c.created_at,
         ev.seq, ev.id, ev.type, ev.object_type, ev.object_id, ev.object_sequence, ev.data, ev.created_at,
         ARRAY(SELECT s.secret FROM webhook_endpoint_secrets s
                WHERE s.endpoint_id = c.endpoint_id AND (s.expires_at IS NULL OR s.expires_at > now())
                ORDER BY s.created_at DESC, s.id DESC)
    FROM claimed c JOIN events ev ON ev.id = c.event_id
   ORDER BY c.id;
END
$function$;

CREATE OR REPLACE FUNCTION public.webhook_deliveries_delivered(p_delivery_id bigint[], p_endpoint_id text[], p_event_id text[], p_attempt integer[], p_started_at timestamp with time zone[], p_duration_ms integer[], p_status_code integer[])
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
  moved integer;
BEGIN
  PERFORM set_config('synchronous_commit', 'off', true);
  -- An endpoint deleted meanwhile took its deliveries with it: nothing to record for those (an
  -- attempt row is keyed by its delivery, whose deletion also deletes its attempts).
  INSERT INTO webhook_delivery_attempts (delivery_id, endpoint_id, event_id, attempt, started_at, duration_ms, status_code, error, delivered)
  SELECT o.delivery_id, o.endpoint_id, o.event_id, o.attempt, o.started_at, o.duration_ms, o.status_code, NULL, true
    FROM unnest(p_delivery_id, p_endpoint_id, p_event_id, p_attempt, p_started_at, p_duration_ms, p_status_code)
         AS o (delivery_id, endpoint_id, event_id, attempt, started_at, duration_ms, status_code)
   WHERE EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.id = o.delivery_id);
  UPDATE webhook_deliveries
     SET state = 'delivered', finished_at = now(), lease_owner = NULL, lease_expires_at = NULL
   WHERE id = ANY (p_delivery_id) AND state = 'pending';
  GET DIAGNOSTICS moved = ROW_COUNT;
  UPDATE webhook_endpoints SET failing_since = NULL WHERE id = ANY (p_endpoint_id) AND failing_since IS NOT NULL;
  RETURN moved;
END
$function$;

CREATE OR REPLACE FUNCTION public.webhook_deliveries_delivered_then_claim(p_delivery_id bigint[], p_endpoint_id text[], p_event_id text[], p_attempt integer[], p_started_at timestamp with time zone[], p_duration_ms integer[], p_status_code integer[], p_owner text, p_lease_ms integer, p_per_endpoint_max integer, p_max integer, p_tenants text[])
 RETURNS TABLE(id bigint, endpoint_id text, tenant text, url text, attempts integer, created_at timestamp with time zone, event_seq bigint, event_id text, event_type text, event_object_type text, event_object_id text, event_object_sequence integer, event_data jsonb, event_created_at timestamp with time zone, secrets text[])
 LANGUAGE plpgsql
AS $function$
BEGIN
  IF cardinality(p_delivery_id) > 0 THEN
    PERFORM webhook_deliveries_delivered(p_delivery_id, p_endpoint_id, p_event_id, p_attempt, p_started_at, p_duration_ms, p_status_code);
  END IF;
  RETURN QUERY SELECT * FROM webhook_deliveries_claim(p_owner, p_lease_ms, p_per_endpoint_max, p_max, p_tenants);
END
$function$;

CREATE OR REPLACE FUNCTION public.webhook_deliveries_take(p_delivery_id bigint[], p_endpoint_id text[], p_event_id text[], p_attempt integer[], p_started_at timestamp with time zone[], p_duration_ms integer[], p_status_code integer[], p_batch_endpoint_id text[], p_batch_from_xact xid8[], p_batch_from_seq bigint[], p_batch_to_xact xid8[], p_batch_to_seq bigint[], p_sent_endpoint_id text[], p_sent_event_id text[], p_sent_started_at timestamp with time zone[], p_sent_duration_ms integer[], p_sent_status_code integer[], p_owner text, p_lease_ms integer, p_per_endpoint_max integer, p_max integer, p_tenants text[], p_batch_events_max integer)
 RETURNS TABLE(lane text, id bigint, endpoint_id text, tenant text, url text, attempts integer, created_at timestamp with time zone, event_seq bigint, event_id text, event_type text, event_object_type text, event_object_id text, event_object_sequence integer, event_data jsonb, event_created_at timestamp with time zone, secrets text[], event_xact text, batch_from_xact text, batch_from_seq bigint, batch_to_xact text, batch_to_seq bigint, batch_slots integer)
 LANGUAGE plpgsql
AS $function$
#variable_conflict use_column
DECLARE
  taken integer;
  room integer;
  horizon xid8;
  candidate record;
  free integer;
  last_xact xid8;
  last_seq bigint;
  subscribed integer;
  slots integer;
  live_secrets text[];
BEGIN
  PERFORM set_config('synchronous_commit', 'off', true);
  IF cardinality(p_delivery_id) > 0 THEN
    PERFORM webhook_deliveries_delivered(p_delivery_id, p_endpoint_id, p_event_id, p_attempt, p_started_at, p_duration_ms, p_status_code);
  END IF;
  IF cardinality(p_batch_endpoint_id) > 0 THEN
    -- Successes only: a batch with a failure is recorded in a transaction of its own, with the
    -- failure's consequences for its endpoint.
    PERFORM webhook_cursor_batches_recorded(
      p_owner, p_batch_endpoint_id, p_batch_from_xact, p_batch_from_seq, p_batch_to_xact, p_batch_to_seq,
      p_sent_endpoint_id, p_sent_event_id, p_sent_started_at, p_sent_duration_ms, p_sent_status_code,
      array_fill(NULL::text, ARRAY[cardinality(p_sent_event_id)]), array_fill(true, ARRAY[cardinality(p_sent_event_id)]),
      array_fill(NULL::timestamptz, ARRAY[cardinality(p_sent_event_id)]));
  END IF;
  IF p_max <= 0 THEN
    RETURN;
  END IF;

  RETURN QUERY
  SELECT 'retry', c.id, c.endpoint_id, c.tenant, c.url, c.attempts, c.created_at,
         c.event_seq, c.event_id, c.event_type, c.event_object_type, c.event_object_id,
         c.event_object_sequence, c.event_data, c.event_created_at, c.secrets,
         NULL::text, NULL::text, NULL::bigint, NULL::text, NULL::bigint, NULL::integer
    FROM webhook_deliveries_claim(p_owner, p_lease_ms, p_per_endpoint_max, p_max, p_tenants) c;
  GET DIAGNOSTICS taken = ROW_COUNT;
  room := p_max - taken;
  IF room <= 0 THEN
    RETURN;
  END IF;
  -- The claims' lock is held (the retry claim took it): cursor leases and their slots are decided
  -- one process at a time, as retry leases are.
  PERFORM pg_advisory_xact_lock(hashtextextended('webhook_deliveries:claim', 0));

  horizon := pg_snapshot_xmin(pg_current_snapshot());
  FOR candidate IN
    SELECT e.id, e.tenant, e.url, e.enabled_events, e.cursor_xact, e.cursor_seq, e.cursor_from_seq
      FROM webhook_endpoints e
     WHERE e.disabled_at IS NULL
       AND (p_tenants IS NULL OR e.tenant = ANY (p_tenants))
       AND (e.cursor_lease_expires_at IS NULL OR e.cursor_lease_expires_at <= now())
       AND EXISTS (SELECT 1 FROM events ev
                    WHERE ev.tenant = e.tenant AND ev.xact_id IS NOT NULL
                      AND (ev.xact_id, ev.seq) > (e.cursor_xact, e.cursor_seq) AND ev.xact_id < horizon)
     -- The cursor furthest behind first.
     ORDER BY e.cursor_xact, e.cursor_seq
     LIMIT room
     FOR UPDATE OF e SKIP LOCKED
  LOOP
    EXIT WHEN room <= 0;
    free := p_per_endpoint_max - (
      SELECT count(*) FROM webhook_deliveries l
       WHERE l.endpoint_id = candidate.id AND l.lease_expires_at IS NOT NULL AND l.lease_expires_at > now() AND l.state = 'pending');
    CONTINUE WHEN free <= 0;

    SELECT s.xact_id, s.seq, s.subscribed INTO last_xact, last_seq, subscribed
      FROM (SELECT ev.xact_id, ev.seq,
                   count(*) FILTER (WHERE ev.seq > candidate.cursor_from_seq
                                      AND (ev.type = ANY (candidate.enabled_events) OR '*' = ANY (candidate.enabled_events)))
                     OVER () AS subscribed
              FROM events ev
             WHERE ev.tenant = candidate.tenant AND ev.xact_id IS NOT NULL
               AND (ev.xact_id, ev.seq) > (candidate.cursor_xact, candidate.cursor_seq) AND ev.xact_id < horizon
             ORDER BY ev.xact_id, ev.seq
             LIMIT p_batch_events_max) s
     ORDER BY s.xact_id DESC, s.seq DESC
     LIMIT 1;
    CONTINUE WHEN last_xact IS NULL;

    IF subscribed = 0 THEN
      -- Nothing here for this endpoint: the cursor passes these events now.
      UPDATE webhook_endpoints SET cursor_xact = last_xact, cursor_seq = last_seq WHERE id = candidate.id;
      CONTINUE;
    END IF;

    slots := least(free, room);
    room := room - slots;
    UPDATE webhook_endpoints
       SET cursor_owner = p_owner, cursor_lease_expires_at = now() + p_lease_ms * interval '1 millisecond', cursor_slots = slots
     WHERE id = candidate.id;
    live_secrets := ARRAY(SELECT s.secret FROM webhook_endpoint_secrets s
                           WHERE s.endpoint_id = candidate.id AND (s.expires_at IS NULL OR s.expires_at > now())
                           ORDER BY s.created_at DESC, s.id DESC);
    RETURN QUERY
    SELECT 'cursor', NULL::bigint, candidate.id, candidate.tenant, candidate.url, 1, now(),
           ev.seq, ev.id, ev.type, ev.object_type, ev.object_id, ev.object_sequence, ev.data, ev.created_at, live_secrets,
           ev.xact_id::text, candidate.cursor_xact::text, candidate.cursor_seq, last_xact::text, last_seq, slots
      FROM events ev
     WHERE ev.tenant = candidate.tenant AND ev.xact_id IS NOT NULL
       AND (ev.xact_id, ev.seq) > (candidate.cursor_xact, candidate.cursor_seq) AND (ev.xact_id, ev.seq) <= (last_xact, last_seq)
       AND ev.seq > candidate.cursor_from_seq
       AND (ev.type = ANY (candidate.enabled_events) OR '*' = ANY (candidate.enabled_events))
     ORDER BY ev.xact_id, ev.seq;
  END LOOP;
END
$function$;

CREATE TRIGGER accounts_key_fixed BEFORE UPDATE OF tenant, id ON accounts FOR EACH ROW WHEN (old.tenant IS DISTINCT FROM new.tenant OR old.id IS DISTINCT FROM new.id) EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER accounts_never_removed BEFORE DELETE OR TRUNCATE ON accounts FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE CONSTRAINT TRIGGER charges_event AFTER INSERT ON charges DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (new.provider IS NOT NULL) EXECUTE FUNCTION ledger_charge_event();
CREATE TRIGGER charges_provider_known BEFORE INSERT OR UPDATE OF provider ON charges FOR EACH ROW WHEN (new.provider IS NOT NULL AND new.provider <> 'stripe'::text) EXECUTE FUNCTION ledger_refuse_unknown_provider();
CREATE CONSTRAINT TRIGGER charges_state_event AFTER UPDATE OF hold_state, provider_state ON charges DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (new.provider IS NOT NULL AND (old.hold_state IS DISTINCT FROM new.hold_state OR old.provider_state IS DISTINCT FROM new.provider_state)) EXECUTE FUNCTION ledger_charge_event();
CREATE TRIGGER events_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON events FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER journal_entries_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON journal_entries FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER journal_entries_checked AFTER INSERT ON journal_entries REFERENCING NEW TABLE AS new_entries FOR EACH STATEMENT EXECUTE FUNCTION ledger_check_journal_insert();
CREATE TRIGGER provider_events_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON provider_events FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER refunds_decision_fixed BEFORE UPDATE ON refunds FOR EACH ROW WHEN ((to_jsonb(old.*) - ARRAY['provider_refund_id'::text, 'provider_refunded_at'::text, 'provider_refund_failure'::text]) IS DISTINCT FROM (to_jsonb(new.*) - ARRAY['provider_refund_id'::text, 'provider_refunded_at'::text, 'provider_refund_failure'::text]) OR old.provider_refund_id IS NOT NULL AND (old.provider_refund_id IS DISTINCT FROM new.provider_refund_id OR old.provider_refunded_at IS DISTINCT FROM new.provider_refunded_at) OR old.provider_refund_failure IS NOT NULL AND old.provider_refund_failure IS DISTINCT FROM new.provider_refund_failure) EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER refunds_event AFTER INSERT ON refunds FOR EACH ROW EXECUTE FUNCTION ledger_refund_event();
CREATE TRIGGER refunds_never_removed BEFORE DELETE OR TRUNCATE ON refunds FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER transfers_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON transfers FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE CONSTRAINT TRIGGER transfers_deposit_event AFTER INSERT ON transfers DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (new.kind = 'deposit'::text) EXECUTE FUNCTION ledger_deposit_event();
CREATE TRIGGER webhook_events_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON webhook_events FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
