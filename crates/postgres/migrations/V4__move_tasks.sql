-- Message move tasks: a row each, newest last. A round of a task's work locks its row, so
-- whichever server runs it (any of them, once a second, or a List or Cancel on the task's
-- source) runs it alone; at most one task per source runs at a time.
CREATE TABLE leasehold_move_tasks (
    n bigserial PRIMARY KEY,
    id text NOT NULL UNIQUE,
    source_key text NOT NULL,
    source_arn text NOT NULL,
    destination_arn text,
    rate integer,
    status text NOT NULL,
    moved bigint NOT NULL DEFAULT 0,
    to_move bigint NOT NULL,
    limit_sent_ms bigint,
    limit_seq bigint,
    started_ms bigint NOT NULL,
    failure text
);

CREATE UNIQUE INDEX leasehold_move_tasks_one_running ON leasehold_move_tasks (source_arn)
    WHERE status = 'RUNNING';
