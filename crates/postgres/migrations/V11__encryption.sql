-- Encryption at rest (issue 30, encryption.rs): a message of a queue that asks for it keeps
-- an empty body and no attributes here, its body and attributes sealed together in `sealed`,
-- bound to its queue and to `content_id`, a random number of its own that moves with it.
ALTER TABLE leasehold_messages
    ADD COLUMN sealed bytea,
    ADD COLUMN content_id bigint;

-- The keys that sealed anything: each server's key file is checked against them at start.
CREATE TABLE leasehold_seals (
    number bigint PRIMARY KEY,
    key_check bytea NOT NULL
);
