-- The demo's target as a team that partitions its fact tables would have it: warehouse.orders declaratively
-- partitioned by partition_hour, one partition per hour of the demo month (warehouse.orders_pYYYYMMDDHH), so a
-- backfill publishes each hour by swapping partitions. Run right after warehouse.sql, before any row is loaded.
-- $1 and $2 are not available to a DO block: the month's bounds are the seed's, as literals below.

ALTER TABLE warehouse.orders RENAME TO orders_plain;
CREATE TABLE warehouse.orders (LIKE warehouse.orders_plain INCLUDING ALL) PARTITION BY RANGE (partition_hour);
DROP TABLE warehouse.orders_plain;

DO $$
DECLARE
  hour timestamptz;
BEGIN
  FOR hour IN SELECT generate_series('2026-11-01T00:00Z'::timestamptz, '2026-11-30T23:00Z'::timestamptz, interval '1 hour') LOOP
    EXECUTE format('CREATE TABLE warehouse.%I PARTITION OF warehouse.orders FOR VALUES FROM (%L) TO (%L)',
      'orders_p' || to_char(hour AT TIME ZONE 'UTC', 'YYYYMMDDHH24'), hour, hour + interval '1 hour');
  END LOOP;
END
$$;
