-- Messages are inserted, updated by every receive and deleted at high rates. Updates touch
-- no indexed column and the table keeps 30% of each page free (fillfactor 70), so a lease
-- is a heap-only update on the same page; vacuum is asked to come after 1% of the table has
-- changed (not the default 20%) and not to pause, so dead rows are reclaimed as fast as the
-- queue churns. Where autovacuum is off or lags, the servers vacuum the table themselves
-- (vacuum.rs); scripts/soak-postgres shows it over ten minutes.
ALTER TABLE leasehold_messages SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);
