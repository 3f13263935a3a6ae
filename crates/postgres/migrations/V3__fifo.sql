-- FIFO queues: a message's group and deduplication id, the five-minute deduplication window
-- and receive attempts, and the group walk a receive makes.

-- ready_order: among FIFO messages that became receivable at the same instant, which did
-- first. A message that became receivable by a command (a send without delay, a release to
-- 0 s, a lease of 0 s, a dead-letter or move into the queue) takes the next number then; one
-- whose delay or lease ran out has none, and goes first: the engine ranks those before any
-- command at that instant (its timers run at the start of every command).
-- extensions, released, late_deleted: what the lease measurements need to know about a
-- message (leases.rs): heartbeats on its current lease; whether that lease was released (a
-- ChangeMessageVisibility to 0) rather than left to run out; whether a delete came late.
ALTER TABLE leasehold_messages
    ADD COLUMN group_id text,
    ADD COLUMN deduplication_id text,
    ADD COLUMN ready_order bigint,
    ADD COLUMN extensions integer NOT NULL DEFAULT 0,
    ADD COLUMN released boolean NOT NULL DEFAULT false,
    ADD COLUMN late_deleted boolean NOT NULL DEFAULT false;

-- A group's messages in order, and the groups of a queue one by one (the walk below).
CREATE INDEX leasehold_messages_by_group ON leasehold_messages (queue_id, group_id, seq)
    WHERE group_id IS NOT NULL;

-- A deduplication id sent within the window answers with the original's sequence number
-- (its message id derives from it). scope is the group under DeduplicationScope
-- messageGroup, '' for the whole queue (a group id is never empty).
CREATE TABLE leasehold_dedup (
    queue_id bigint NOT NULL,
    scope text NOT NULL,
    dedup_id text NOT NULL,
    seq bigint NOT NULL,
    expires_ms bigint NOT NULL,
    PRIMARY KEY (queue_id, scope, dedup_id)
);

-- A receive retried with its ReceiveRequestAttemptId gets the same messages back, as long as
-- each is still at the receive count it was handed out with.
-- The attempt id is kept as bytes: SQS takes any, PostgreSQL's text no NUL.
CREATE TABLE leasehold_receive_attempts (
    queue_id bigint NOT NULL,
    attempt_id bytea NOT NULL,
    seqs bigint[] NOT NULL,
    receive_counts integer[] NOT NULL,
    expires_ms bigint NOT NULL,
    PRIMARY KEY (queue_id, attempt_id)
);

-- Reserves a FIFO send's sequence number under its deduplication id. Sends to one group take
-- turns (so a group's sequence numbers are in commit order and a receive never sees a later
-- one before an earlier one), and a deduplication id already sent within the window answers
-- the original's sequence number with fresh = false.
CREATE FUNCTION leasehold_fifo_reserve(q bigint, grp text, p_scope text, p_dedup text,
                                       now_ms bigint, window_ms bigint)
RETURNS TABLE (reserved_seq bigint, fresh boolean) LANGUAGE plpgsql AS $$
DECLARE
    s bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('send ' || grp, q));
    s := nextval('leasehold_message_seqs');
    INSERT INTO leasehold_dedup AS d (queue_id, scope, dedup_id, seq, expires_ms)
    VALUES (q, p_scope, p_dedup, s, now_ms + window_ms)
    ON CONFLICT (queue_id, scope, dedup_id) DO UPDATE
        SET seq = excluded.seq, expires_ms = excluded.expires_ms
        WHERE d.expires_ms <= now_ms;
    IF FOUND THEN
        reserved_seq := s;
        fresh := true;
    ELSE
        SELECT d.seq INTO reserved_seq FROM leasehold_dedup d
        WHERE d.queue_id = q AND d.scope = p_scope AND d.dedup_id = p_dedup;
        fresh := false;
    END IF;
    RETURN NEXT;
END $$;

-- A FIFO receive's walk, the engine's `Queue::receive`: groups whose oldest message is
-- receivable, in the order they became so; in each, messages in order as far as they are
-- receivable, until max_n are leased. A group another receive is walking is skipped (its
-- lock), so two receives never lease one group's messages out of order. Messages already
-- received max_receives times are answered as exhausted and not leased: the caller moves
-- them to the dead-letter queue in the same transaction.
CREATE FUNCTION leasehold_fifo_claim(q bigint, now_ms bigint, max_n integer, until_ms bigint,
                                     oldest_kept bigint, max_receives integer)
RETURNS TABLE (claimed_seq bigint, exhausted boolean, expired boolean) LANGUAGE plpgsql AS $$
DECLARE
    g text;
    m record;
    taken integer := 0;
    -- A lease of 0 s makes its messages receivable again by this command.
    released_at bigint := CASE WHEN until_ms <= now_ms THEN nextval('leasehold_message_seqs') END;
BEGIN
    FOR g IN
        WITH RECURSIVE groups AS (
            (SELECT x.group_id FROM leasehold_messages x
             WHERE x.queue_id = q AND x.group_id IS NOT NULL
             ORDER BY x.group_id LIMIT 1)
            UNION ALL
            SELECT (SELECT x.group_id FROM leasehold_messages x
                    WHERE x.queue_id = q AND x.group_id > groups.group_id
                    ORDER BY x.group_id LIMIT 1)
            FROM groups WHERE groups.group_id IS NOT NULL)
        SELECT groups.group_id FROM groups
        CROSS JOIN LATERAL (
            SELECT x.visible_ms, x.ready_order, x.seq FROM leasehold_messages x
            WHERE x.queue_id = q AND x.group_id = groups.group_id AND x.sent_ms > oldest_kept
            ORDER BY x.seq LIMIT 1) head
        WHERE head.visible_ms <= now_ms
        ORDER BY head.visible_ms, head.ready_order NULLS FIRST, head.seq
    LOOP
        EXIT WHEN taken >= max_n;
        CONTINUE WHEN NOT pg_try_advisory_xact_lock(hashtextextended('receive ' || g, q));
        -- A statement of its own, after the lock: it sees what the group's last walker left.
        FOR m IN
            SELECT x.seq, x.visible_ms, x.receive_count, x.released FROM leasehold_messages x
            WHERE x.queue_id = q AND x.group_id = g AND x.sent_ms > oldest_kept
            ORDER BY x.seq
            FOR UPDATE
        LOOP
            EXIT WHEN taken >= max_n OR m.visible_ms > now_ms;
            claimed_seq := m.seq;
            exhausted := m.receive_count >= max_receives;
            -- Received before and not released: its last lease ran out.
            expired := m.receive_count > 0 AND NOT m.released;
            IF NOT exhausted THEN
                UPDATE leasehold_messages x
                SET visible_ms = until_ms, receive_count = x.receive_count + 1,
                    first_receive_ms = coalesce(x.first_receive_ms, now_ms), received_ms = now_ms,
                    ready_order = released_at, extensions = 0, released = false
                WHERE x.queue_id = q AND x.seq = m.seq;
                taken := taken + 1;
            END IF;
            RETURN NEXT;
        END LOOP;
    END LOOP;
END $$;
