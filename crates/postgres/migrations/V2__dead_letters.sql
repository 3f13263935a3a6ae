-- A message dead-lettered from another queue keeps its id and says where it came from.
ALTER TABLE leasehold_messages
    ADD COLUMN message_id bytea,
    ADD COLUMN dead_letter_source_arn text;

-- A queue's MessageRetentionPeriod beside its record, for the cluster's retention sweep.
ALTER TABLE leasehold_queues
    ADD COLUMN retention_ms bigint NOT NULL DEFAULT 345600000;
