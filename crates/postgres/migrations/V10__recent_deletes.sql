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

-- Every slot there from the start, so a delete updates a row rather than inserts one (an
-- insert of a slot two transactions both lack would make the second wait). Queue id 0 names
-- no queue. After a crash empties the table, deletes insert the slots again.
INSERT INTO leasehold_recent_deletes (slot, queue_id, seq, receive_no, deleted_ms)
SELECT slot, 0, 0, 0, 0 FROM generate_series(0, 65535) AS slot;
