-- The demo's target as a team that partitions its fact tables would have it: warehouse.orders declaratively
-- partitioned by partition_hour. Run right after warehouse.sql, before any row is loaded; the partitions
-- themselves (one per hour, warehouse.orders_pYYYYMMDDHH, or one per day where asked) are created by the seed
-- (dev/demo/seed.ts, partitionStatements).

ALTER TABLE warehouse.orders RENAME TO orders_plain;
CREATE TABLE warehouse.orders (LIKE warehouse.orders_plain INCLUDING ALL) PARTITION BY RANGE (partition_hour);
DROP TABLE warehouse.orders_plain;
