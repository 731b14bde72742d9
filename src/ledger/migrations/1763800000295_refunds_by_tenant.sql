-- Up Migration

-- GET /v1/refunds without `charge` lists a tenant's refunds newest first, as Stripe's refund list
-- does: keyset pages over (created_at, id), served by this index (the primary key leads with the
-- charge, so without it every page would read and sort all of the tenant's refunds).
CREATE INDEX refunds_by_tenant ON refunds (tenant, created_at, id);

-- Down Migration
DROP INDEX refunds_by_tenant;
