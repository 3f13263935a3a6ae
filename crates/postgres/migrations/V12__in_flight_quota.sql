-- The in-flight quota (issue 34, quota.rs): how many messages of a queue are leased now, over
-- every server of the cluster, without reading the queue's rows. Each lease is counted under
-- the second it ends in; a count is the sum of the seconds still ahead, so a lease that runs
-- out leaves the count by itself within the second, and one that ends early (a delete, a
-- release, a shorter or longer visibility) is taken out of its second and, if it goes on, put
-- into its new one.
--
-- Triggers on the message table do the counting, once a statement, whatever statement moved a
-- lease (claims standard and FIFO, deletes, visibility changes, give-backs, purges, sweeps,
-- moves), so no path can forget it. `holder` is the backend that counted: two transactions
-- never wait for one counting row (a delete on one backend of a lease counted by another
-- takes it out of its own row, which may go below zero; the sum is what counts).
CREATE TABLE leasehold_in_flight (
    queue_id bigint NOT NULL,
    until_s bigint NOT NULL,
    holder integer NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (queue_id, until_s, holder)
);

-- A message is leased (in flight) while it was received and its visibility has not ended: as
-- ApproximateNumberOfMessagesNotVisible counts it.
CREATE FUNCTION leasehold_count_leases() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    now_ms bigint := leasehold_now();
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO leasehold_in_flight AS f (queue_id, until_s, holder, n)
        SELECT queue_id, (visible_ms + 999) / 1000, pg_backend_pid(), count(*)
        FROM new_rows WHERE received_ms IS NOT NULL AND visible_ms > now_ms
        GROUP BY 1, 2
        ON CONFLICT (queue_id, until_s, holder) DO UPDATE SET n = f.n + excluded.n;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO leasehold_in_flight AS f (queue_id, until_s, holder, n)
        SELECT queue_id, (visible_ms + 999) / 1000, pg_backend_pid(), -count(*)
        FROM old_rows WHERE received_ms IS NOT NULL AND visible_ms > now_ms
        GROUP BY 1, 2
        ON CONFLICT (queue_id, until_s, holder) DO UPDATE SET n = f.n + excluded.n;
    ELSE
        INSERT INTO leasehold_in_flight AS f (queue_id, until_s, holder, n)
        SELECT queue_id, until_s, pg_backend_pid(), sum(d)
        FROM (SELECT queue_id, (visible_ms + 999) / 1000 AS until_s, -1 AS d FROM old_rows
              WHERE received_ms IS NOT NULL AND visible_ms > now_ms
              UNION ALL
              SELECT queue_id, (visible_ms + 999) / 1000, 1 FROM new_rows
              WHERE received_ms IS NOT NULL AND visible_ms > now_ms) moved
        GROUP BY 1, 2 HAVING sum(d) <> 0
        ON CONFLICT (queue_id, until_s, holder) DO UPDATE SET n = f.n + excluded.n;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER leasehold_count_inserted AFTER INSERT ON leasehold_messages
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION leasehold_count_leases();
CREATE TRIGGER leasehold_count_updated AFTER UPDATE ON leasehold_messages
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION leasehold_count_leases();
CREATE TRIGGER leasehold_count_deleted AFTER DELETE ON leasehold_messages
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION leasehold_count_leases();

-- The leases already there when this migration runs.
INSERT INTO leasehold_in_flight (queue_id, until_s, holder, n)
SELECT queue_id, (visible_ms + 999) / 1000, 0, count(*)
FROM leasehold_messages WHERE received_ms IS NOT NULL AND visible_ms > leasehold_now()
GROUP BY 1, 2;

-- How many messages of queue q are in flight at now_ms: a lease counts to the end of the
-- second it ends in.
CREATE FUNCTION leasehold_in_flight_of(q bigint, now_ms bigint) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT coalesce(sum(n), 0)::bigint FROM leasehold_in_flight
    WHERE queue_id = q AND until_s > now_ms / 1000
$$;

-- Before a transaction claims from queues qs, wanting ws messages of each: each queue's lock,
-- in queue id order (no two transactions wait for each other's in turn). Shared while the
-- queue is far from its quota (claims of several servers go side by side: together they take
-- fewer than `margin` messages at once), alone once it is near (it waits for the shared
-- holders to commit, and the claim that follows counts exactly what they leased). Claims
-- count their room again after it (`leasehold_in_flight_of`).
CREATE FUNCTION leasehold_quota_lock(qs bigint[], ws bigint[], quota bigint, margin bigint,
                                     now_ms bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT q, sum(w) AS w FROM unnest(qs, ws) AS u(q, w) GROUP BY q ORDER BY q LOOP
        IF quota - leasehold_in_flight_of(r.q, now_ms) - r.w < margin THEN
            PERFORM pg_advisory_xact_lock(1886351984, (r.q & 2147483647)::integer);
        ELSE
            PERFORM pg_advisory_xact_lock_shared(1886351984, (r.q & 2147483647)::integer);
        END IF;
    END LOOP;
END $$;
