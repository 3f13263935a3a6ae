-- A deleted queue goes at once (its name answers QueueDoesNotExist, and may be used again a
-- minute later), and its rows in the background: the sweep deletes them a bounded number a
-- round, so deleting a queue of millions of messages is one short transaction. A command that
-- began on the queue before it was deleted may still add a row for its id; the id stays here
-- a minute after its last row is gone, so the sweep finds those too.
CREATE TABLE leasehold_dropped_queues (
    queue_id bigint PRIMARY KEY,
    dropped_ms bigint NOT NULL
);
