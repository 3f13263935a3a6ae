-- One lock order (issue 46). PostgreSQL breaks a cycle of lock waits by failing one of its
-- transactions after a second's wait. Batch deletes, batch visibility changes and purges lock
-- a queue's message rows in sequence order; a FIFO claim never waits for a message row at all,
-- so it is in no cycle with any of them, whatever they hold. Before, the walk's FOR over a
-- locking SELECT fetched and locked rows 10, then 50, at a time, rows it never leased (in-flight
-- ones a delete was about to take among them), and waited for each.
--
-- A group's walk ends at the first row another transaction holds, or one gone since the walk
-- began: what follows it waits for a later receive, so the group's order holds.
CREATE OR REPLACE FUNCTION leasehold_fifo_claim(q bigint, now_ms bigint, max_n integer, until_ms bigint,
                                     oldest_kept bigint, max_receives integer)
RETURNS TABLE (claimed_seq bigint, exhausted boolean, expired boolean) LANGUAGE plpgsql AS $$
DECLARE
    g text;
    s bigint;
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
        WHERE leasehold_group_eligible(head.visible_ms, now_ms)
        ORDER BY head.visible_ms, head.ready_order NULLS FIRST, head.seq
    LOOP
        EXIT WHEN taken >= max_n;
        CONTINUE WHEN NOT pg_try_advisory_xact_lock(hashtextextended('receive ' || g, q));
        -- The group's rows in order, locking none: each is locked below, alone, without waiting.
        FOR s IN
            SELECT x.seq FROM leasehold_messages x
            WHERE x.queue_id = q AND x.group_id = g AND x.sent_ms > oldest_kept
            ORDER BY x.seq
        LOOP
            EXIT WHEN taken >= max_n;
            -- A statement of its own: it sees what the row's last holder left.
            SELECT x.seq, x.visible_ms, x.receive_count, x.released INTO m
            FROM leasehold_messages x
            WHERE x.queue_id = q AND x.seq = s
            FOR UPDATE SKIP LOCKED;
            EXIT WHEN NOT FOUND OR NOT leasehold_group_eligible(m.visible_ms, now_ms);
            claimed_seq := m.seq;
            exhausted := leasehold_exhausted(m.receive_count, max_receives);
            expired := leasehold_lease_ran_out(m.receive_count, m.released, m.visible_ms, now_ms);
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
