-- Honest leases, cluster-wide: every server adds what it measured (deltas) every few
-- seconds, so a report read from here covers every server's consumers.

-- A queue's counters (the engine's QueueStats).
CREATE TABLE leasehold_queue_stats (
    queue_id bigint PRIMARY KEY,
    sent bigint NOT NULL DEFAULT 0,
    received bigint NOT NULL DEFAULT 0,
    deleted bigint NOT NULL DEFAULT 0,
    empty_receives bigint NOT NULL DEFAULT 0,
    leases_expired bigint NOT NULL DEFAULT 0,
    late_deletes bigint NOT NULL DEFAULT 0,
    dead_lettered bigint NOT NULL DEFAULT 0,
    dead_lettered_after_late_delete bigint NOT NULL DEFAULT 0,
    deleted_within_lease bigint NOT NULL DEFAULT 0,
    released_early bigint NOT NULL DEFAULT 0,
    extensions bigint NOT NULL DEFAULT 0,
    repeat_deletes bigint NOT NULL DEFAULT 0
);

-- Histograms as counts that add up: series 'hold' and 'first_receive' (HDR buckets by their
-- highest value, value_ms; window_ms is the start of a 3-minute window of the recent 15, or
-- -1 for since the start), 'receive_counts' and 'extensions' (value_ms is the key).
CREATE TABLE leasehold_lease_counts (
    queue_id bigint NOT NULL,
    series text NOT NULL,
    window_ms bigint NOT NULL,
    value_ms bigint NOT NULL,
    count bigint NOT NULL,
    PRIMARY KEY (queue_id, series, window_ms, value_ms)
);
