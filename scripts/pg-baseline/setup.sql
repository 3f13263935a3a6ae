-- The raw-SQL baseline's table: the shape of leasehold_messages, nothing else.
CREATE TABLE bl_messages (
    queue_id bigint NOT NULL,
    seq bigint NOT NULL,
    sent_ms bigint NOT NULL,
    visible_ms bigint NOT NULL,
    receive_count integer NOT NULL DEFAULT 0,
    body text NOT NULL,
    PRIMARY KEY (queue_id, seq)
) WITH (fillfactor = 70);
CREATE INDEX bl_by_age ON bl_messages (queue_id, sent_ms, seq);
CREATE SEQUENCE bl_seq;
