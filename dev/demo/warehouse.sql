-- Harborlight's own tables: the pipeline "orders" and what reads it. Not a migration: the demo seed runs this
-- file to start the warehouse over, so it drops the schema first. backfill-bot's control tables live in
-- schema "backfill" (migrations/) and only describe these.

DROP SCHEMA IF EXISTS warehouse CASCADE;
CREATE SCHEMA warehouse;

-- Raw orders as the source connector lands them, one row per order, three shards per hour.
-- currency_raw is whatever text the source sent: normally 'SEK', on night 15 '"sek"'.
CREATE TABLE warehouse.orders_raw (
  order_id      bigint NOT NULL,
  shard         smallint NOT NULL CHECK (shard BETWEEN 1 AND 3),
  event_hour    timestamptz NOT NULL CHECK (date_trunc('hour', event_hour) = event_hour),
  merchant_id   integer NOT NULL,
  currency_raw  text NOT NULL,
  amount_local  numeric(14, 2) NOT NULL,
  landed_at     timestamptz NOT NULL
);
CREATE INDEX orders_raw_event_hour ON warehouse.orders_raw (event_hour, shard);

-- Source rows that exist upstream but have not reached orders_raw yet (night 9's outage in the
-- night-9-outage scenario). Same columns in the same order, so delivery is INSERT … SELECT *.
CREATE TABLE warehouse.orders_raw_pending (LIKE warehouse.orders_raw INCLUDING ALL);
CREATE INDEX orders_raw_pending_landed_at ON warehouse.orders_raw_pending (landed_at);

-- Daily rates to the base currency (USD, rate 1). The rate of an order is the rate of its UTC event date.
CREATE TABLE warehouse.fx_rates (
  rate_date     date NOT NULL,
  currency      text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
  rate_to_base  numeric(12, 6) NOT NULL CHECK (rate_to_base > 0),
  PRIMARY KEY (rate_date, currency)
);

-- The pipeline's output: one partition per hour, written only by replacePartition (delete, then the step SQL).
CREATE TABLE warehouse.orders (
  partition_hour  timestamptz NOT NULL,
  order_id        bigint NOT NULL,
  shard           smallint NOT NULL,
  merchant_id     integer NOT NULL,
  currency        text NOT NULL,
  amount_local    numeric(14, 2) NOT NULL,
  fx_rate         numeric(12, 6) NOT NULL,
  amount_base     numeric(14, 2) NOT NULL,
  PRIMARY KEY (partition_hour, order_id)
);

-- Consumers' outputs. Each is rebuilt by its retrigger SQL (backfill.consumers.retrigger) with an idempotent
-- upsert; none holds a volatile column, so rebuilding twice compares equal.
CREATE TABLE warehouse.settlement_report (
  report_date  date PRIMARY KEY,
  total        numeric(18, 2) NOT NULL,
  order_count  bigint NOT NULL
);

CREATE TABLE warehouse.payout_export (
  report_date  date PRIMARY KEY,
  total        numeric(18, 2) NOT NULL
);

CREATE TABLE warehouse.demand_forecast_inputs (
  day          date PRIMARY KEY,
  orders       bigint NOT NULL,
  amount_base  numeric(18, 2) NOT NULL
);

-- Weeks start on Sunday (2026-11-01 is one), so the first week is 11-01..11-07.
CREATE TABLE warehouse.marketing_weekly (
  week_start   date PRIMARY KEY CHECK (extract(dow FROM week_start) = 0),
  orders       bigint NOT NULL,
  amount_base  numeric(18, 2) NOT NULL
);
