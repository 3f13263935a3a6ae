-- A receive rewrites its message's row (the lease), and a group's claim rewrites many rows of
-- the same few pages at once: messages sent together sit together. At fillfactor 70 a page of
-- about fifteen rows kept room for about six new versions, and the rest went to other pages:
-- not heap-only, so a new entry in every index and a lock record more in the WAL per lease
-- (45% of a full cycle's leases, measured with pg_waldump). At 40 a page's rows all find room for their new
-- versions on it, and every lease is a heap-only update (BENCHMARKS.md, "Room for the
-- leases"). The price is space: a backlog takes about 1.75 times the pages. Rows inserted
-- from now on get the room; rows already stored keep theirs.
ALTER TABLE leasehold_messages SET (fillfactor = 40);

-- (V10's ring of recent deletes is now written beside a delete's commit rather than by its
-- statement: crates/postgres/src/recent_deletes.rs.)
