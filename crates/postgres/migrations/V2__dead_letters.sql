-- A message dead-lettered from another queue keeps its id and says where it came from.
ALTER TABLE leasehold_messages
    ADD COLUMN message_id bytea,
    ADD COLUMN dead_letter_source_arn text;

-- A queue's MessageRetentionPeriod beside its record, for the cluster's retention sweep.
ALTER TABLE leasehold_queues
    ADD COLUMN retention_ms bigint NOT NULL DEFAULT 345600000;

-- Standard queues hand out the oldest message first by send time, as the engine does (a
-- message dead-lettered in keeps its send time).
CREATE INDEX leasehold_messages_by_age ON leasehold_messages (queue_id, sent_ms, seq);
