-- The deletes of the last minutes, the cluster's: a delete that finds its message gone is an
-- SDK's retry of one that removed it, not a repeat delete, whichever server the retry
-- reaches (the embedded store keeps the same memory in the engine, `RecentDeletes`). A fixed
-- ring of slots (a hash of the queue and the message): written in the delete's own
-- statement, overwritten rather than swept, so it never grows and its rows change in place
-- (heap-only updates, no index entry per delete). Unlogged: a crash or a failover forgets
-- it, and a retry then counts as a repeat delete, as one past the window does.
CREATE UNLOGGED TABLE leasehold_recent_deletes (
    slot integer PRIMARY KEY,
    queue_id bigint NOT NULL,
    seq bigint NOT NULL,
    receive_no integer NOT NULL,
    deleted_ms bigint NOT NULL
) WITH (fillfactor = 50);
