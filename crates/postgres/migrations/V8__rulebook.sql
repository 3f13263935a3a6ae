-- The rulebook's predicates that SQL evaluates itself, inside a claim under SKIP LOCKED or a
-- delete's one statement: each is the Rust rule of the same name in
-- crates/engine/src/rules.rs, and crates/postgres/tests/rules_sql.rs checks the two agree on
-- generated inputs. Plain SQL functions: the planner inlines them. visible_ms is the rules'
-- hidden_until_ms; a message is receivable when visible_ms <= now.

-- rules::group_eligible (MessageLease::receivable): a FIFO group's head opens the group to a
-- receive when it is receivable; the walk then takes its messages while each is.
CREATE FUNCTION leasehold_group_eligible(visible_ms bigint, now_ms bigint)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT visible_ms <= now_ms
$$;

-- MessageLease::is_live: the handle of receive receive_no holds the current, live lease.
CREATE FUNCTION leasehold_lease_live(receive_count integer, receive_no integer,
                                     visible_ms bigint, now_ms bigint)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT receive_count = receive_no AND visible_ms > now_ms
$$;

-- MessageLease::ran_out: the newest lease ran out by itself (neither deleted nor released).
CREATE FUNCTION leasehold_lease_ran_out(receive_count integer, released boolean,
                                        visible_ms bigint, now_ms bigint)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT receive_count > 0 AND visible_ms <= now_ms AND NOT released
$$;

-- rules::exhausted, with max_receives from rules::max_receives_for_sql (no policy: never).
CREATE FUNCTION leasehold_exhausted(receive_count integer, max_receives integer)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT receive_count >= max_receives
$$;

-- The FIFO walk of V3, its eligibility, exhaustion and expiry now the rules' predicates.
CREATE OR REPLACE FUNCTION leasehold_fifo_claim(q bigint, now_ms bigint, max_n integer, until_ms bigint,
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
        WHERE leasehold_group_eligible(head.visible_ms, now_ms)
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
            EXIT WHEN taken >= max_n OR NOT leasehold_group_eligible(m.visible_ms, now_ms);
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
