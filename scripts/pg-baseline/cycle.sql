-- One full cycle of ten messages in the fewest statements the job needs: a batch insert, a
-- SKIP LOCKED claim that starts the leases, and a delete of claimed rows. Each statement
-- commits on its own, as Leasehold's three requests do.
INSERT INTO bl_messages (queue_id, seq, sent_ms, visible_ms, body)
SELECT 1, nextval('bl_seq'), 0, 0, repeat('x', 200) FROM generate_series(1, 10);
WITH picked AS (
    SELECT seq FROM bl_messages WHERE queue_id = 1 AND visible_ms <= 1
    ORDER BY sent_ms, seq LIMIT 10 FOR UPDATE SKIP LOCKED)
UPDATE bl_messages m SET visible_ms = 2, receive_count = m.receive_count + 1
FROM picked WHERE m.queue_id = 1 AND m.seq = picked.seq;
DELETE FROM bl_messages WHERE queue_id = 1 AND seq IN (
    SELECT seq FROM bl_messages WHERE queue_id = 1 AND visible_ms = 2
    ORDER BY sent_ms, seq LIMIT 10 FOR UPDATE SKIP LOCKED);
