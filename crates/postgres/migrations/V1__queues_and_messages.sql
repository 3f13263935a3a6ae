-- Leasehold's shared state: one cluster row, queues, and their messages.

-- The cluster's receipt key (any server validates any handle) and its clock: the database's
-- own, unless a test freezes it or time travel moves it for every server at once.
CREATE TABLE leasehold_cluster (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    receipt_key bytea NOT NULL CHECK (length(receipt_key) = 16),
    clock_frozen_ms bigint,
    clock_offset_ms bigint NOT NULL DEFAULT 0
);

CREATE FUNCTION leasehold_now() RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT coalesce(
        clock_frozen_ms,
        (extract(epoch FROM clock_timestamp()) * 1000)::bigint + clock_offset_ms
    ) FROM leasehold_cluster
$$;

CREATE SEQUENCE leasehold_queue_ids;

-- A queue: its engine record (settings, tags, instants, counters) in the store's codec, so
-- the engine's own rules read and write it.
CREATE TABLE leasehold_queues (
    key text PRIMARY KEY,
    id bigint NOT NULL UNIQUE,
    record bytea NOT NULL,
    dead_letter_target_arn text
);

-- A deleted queue's name cannot be reused for a minute.
CREATE TABLE leasehold_deleted_queues (
    key text PRIMARY KEY,
    deleted_ms bigint NOT NULL
);

CREATE SEQUENCE leasehold_message_seqs;

-- A message: receivable when visible_ms has come; received_ms is the start of its current
-- lease. Rows are updated in place by every receive, so pages keep room for new versions.
CREATE TABLE leasehold_messages (
    queue_id bigint NOT NULL,
    seq bigint NOT NULL,
    sent_ms bigint NOT NULL,
    visible_ms bigint NOT NULL,
    receive_count integer NOT NULL DEFAULT 0,
    first_receive_ms bigint,
    received_ms bigint,
    body text NOT NULL,
    attributes bytea,
    system_attributes bytea,
    PRIMARY KEY (queue_id, seq)
) WITH (fillfactor = 70);
