//! FIFO queues: naming, group order, deduplication, sequence numbers, receive attempts,
//! expired handles.

mod script;
use expect_test::expect;
use script::{check, check_strict};

#[test]
fn fifo_needs_the_attribute_and_the_suffix_together() {
    check(
        "
        create jobs.fifo
        create jobs FifoQueue=true
        create jobs.fifo FifoQueue=false
        create jobs.fifo FifoQueue=true
        attrs jobs.fifo FifoQueue ContentBasedDeduplication DeduplicationScope FifoThroughputLimit
        set jobs.fifo FifoQueue=false
        create plain ContentBasedDeduplication=true
        create hi.fifo FifoQueue=true FifoThroughputLimit=perMessageGroupId
        create hi.fifo FifoQueue=true FifoThroughputLimit=perMessageGroupId DeduplicationScope=messageGroup
        ",
        expect![[r#"
            create jobs.fifo             -> error InvalidParameterValue("The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, must end with .fifo suffix and be 1 to 80 in length.")
            create jobs FifoQueue=true   -> error InvalidParameterValue("The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, must end with .fifo suffix and be 1 to 80 in length.")
            create jobs.fifo FifoQueue=false -> error InvalidParameterValue("The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, must end with .fifo suffix and be 1 to 80 in length.")
            create jobs.fifo FifoQueue=true -> ok
            attrs jobs.fifo FifoQueue ContentBasedDeduplication DeduplicationScope FifoThroughputLimit -> ContentBasedDeduplication=false DeduplicationScope=queue FifoQueue=true FifoThroughputLimit=perQueue
            set jobs.fifo FifoQueue=false -> error InvalidAttributeValueReason("Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported.")
            create plain ContentBasedDeduplication=true -> error InvalidAttributeName("ContentBasedDeduplication")
            create hi.fifo FifoQueue=true FifoThroughputLimit=perMessageGroupId -> error InvalidAttributeValue("FifoThroughputLimit")
            create hi.fifo FifoQueue=true FifoThroughputLimit=perMessageGroupId DeduplicationScope=messageGroup -> ok
        "#]],
    );
}

#[test]
fn fifo_sends_need_a_group_and_a_deduplication_id_and_no_per_message_delay() {
    check(
        "
        create q.fifo FifoQueue=true
        send q.fifo a
        send q.fifo a group=g
        send q.fifo a group=g dedup=d1
        send q.fifo b group=g dedup=d2 delay=5
        send q.fifo b group=g dedup=d2 delay=0
        create c.fifo FifoQueue=true ContentBasedDeduplication=true
        send c.fifo body group=g
        ",
        expect![[r#"
            create q.fifo FifoQueue=true -> ok
            send q.fifo a                -> error MissingParameter("MessageGroupId")
            send q.fifo a group=g        -> error InvalidParameterValue("The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")
            send q.fifo a group=g dedup=d1 -> seq=1
            send q.fifo b group=g dedup=d2 delay=5 -> error InvalidParameterValue("Value 5 for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type.")
            send q.fifo b group=g dedup=d2 delay=0 -> seq=2
            create c.fifo FifoQueue=true ContentBasedDeduplication=true -> ok
            send c.fifo body group=g     -> seq=1
        "#]],
    );
}

#[test]
fn a_group_delivers_in_order_and_is_blocked_while_a_message_is_in_flight() {
    check(
        "
        create q.fifo FifoQueue=true ContentBasedDeduplication=true VisibilityTimeout=30
        send q.fifo a1 group=a
        send q.fifo b1 group=b
        send q.fifo a2 group=a
        send q.fifo a3 group=a
        send q.fifo b2 group=b
        recv q.fifo max=2
        recv q.fifo max=1
        recv q.fifo
        del q.fifo h1
        recv q.fifo
        del q.fifo h2
        recv q.fifo
        del q.fifo h3
        recv q.fifo
        ",
        expect![[r#"
            create q.fifo FifoQueue=true ContentBasedDeduplication=true VisibilityTimeout=30 -> ok
            send q.fifo a1 group=a       -> seq=1
            send q.fifo b1 group=b       -> seq=2
            send q.fifo a2 group=a       -> seq=3
            send q.fifo a3 group=a       -> seq=4
            send q.fifo b2 group=b       -> seq=5
            recv q.fifo max=2            -> a1 rc=1 h1, a2 rc=1 h2
            recv q.fifo max=1            -> b1 rc=1 h3
            recv q.fifo                  -> (empty)
            del q.fifo h1                -> removed
            recv q.fifo                  -> (empty)
            del q.fifo h2                -> removed
            recv q.fifo                  -> a3 rc=1 h4
            del q.fifo h3                -> removed
            recv q.fifo                  -> b2 rc=1 h5
        "#]],
    );
}

#[test]
fn an_expired_lease_returns_the_group_head_and_a_release_returns_it_again() {
    check(
        "
        create q.fifo FifoQueue=true ContentBasedDeduplication=true VisibilityTimeout=30
        send q.fifo m1 group=g
        send q.fifo m2 group=g
        recv q.fifo max=1
        advance 30
        recv q.fifo max=10
        vis q.fifo h2 0
        recv q.fifo max=1
        ",
        expect![[r#"
            create q.fifo FifoQueue=true ContentBasedDeduplication=true VisibilityTimeout=30 -> ok
            send q.fifo m1 group=g       -> seq=1
            send q.fifo m2 group=g       -> seq=2
            recv q.fifo max=1            -> m1 rc=1 h1
            advance 30                   -> t+30s
            recv q.fifo max=10           -> m1 rc=2 h2, m2 rc=1 h3
            vis q.fifo h2 0              -> ok
            recv q.fifo max=1            -> m1 rc=3 h4
        "#]],
    );
}

#[test]
fn a_group_delivers_from_its_head_up_to_the_first_message_in_flight() {
    // AWS-recorded: receive foo, bar, baz; bar's lease is cut to 4 s; when foo's lease
    // runs out, foo and bar are delivered again while baz is still in flight.
    check(
        "
        create q.fifo FifoQueue=true ContentBasedDeduplication=true VisibilityTimeout=10
        send q.fifo foo group=g
        send q.fifo bar group=g
        send q.fifo baz group=g
        recv q.fifo max=10
        vis q.fifo h2 4
        vis q.fifo h3 20
        advance 4
        recv q.fifo max=10
        advance 6
        recv q.fifo max=10
        ",
        expect![[r#"
            create q.fifo FifoQueue=true ContentBasedDeduplication=true VisibilityTimeout=10 -> ok
            send q.fifo foo group=g      -> seq=1
            send q.fifo bar group=g      -> seq=2
            send q.fifo baz group=g      -> seq=3
            recv q.fifo max=10           -> foo rc=1 h1, bar rc=1 h2, baz rc=1 h3
            vis q.fifo h2 4              -> ok
            vis q.fifo h3 20             -> ok
            advance 4                    -> t+4s
            recv q.fifo max=10           -> (empty)
            advance 6                    -> t+10s
            recv q.fifo max=10           -> foo rc=2 h4, bar rc=2 h5
        "#]],
    );
}

#[test]
fn a_released_head_is_delivered_while_later_messages_of_its_group_are_in_flight() {
    // AWS-recorded: receive g1-m1 and g1-m2, release g1-m1, receive 3: g2-m1, then g1-m1.
    check(
        "
        create q.fifo FifoQueue=true ContentBasedDeduplication=true VisibilityTimeout=30
        send q.fifo g1-m1 group=g1
        send q.fifo g1-m2 group=g1
        send q.fifo g2-m1 group=g2
        recv q.fifo max=2
        vis q.fifo h1 0
        recv q.fifo max=3
        ",
        expect![[r#"
            create q.fifo FifoQueue=true ContentBasedDeduplication=true VisibilityTimeout=30 -> ok
            send q.fifo g1-m1 group=g1   -> seq=1
            send q.fifo g1-m2 group=g1   -> seq=2
            send q.fifo g2-m1 group=g2   -> seq=3
            recv q.fifo max=2            -> g1-m1 rc=1 h1, g1-m2 rc=1 h2
            vis q.fifo h1 0              -> ok
            recv q.fifo max=3            -> g2-m1 rc=1 h3, g1-m1 rc=2 h4
        "#]],
    );
}

#[test]
fn groups_served_with_visibility_zero_go_behind_groups_that_waited() {
    // AWS-recorded: after a receive with VisibilityTimeout=0 the groups it served come last,
    // in the order it served them.
    check(
        "
        create q.fifo FifoQueue=true ContentBasedDeduplication=true
        send q.fifo g1-m1 group=g1
        send q.fifo g2-m1 group=g2
        send q.fifo g2-m2 group=g2
        send q.fifo g3-m1 group=g3
        send q.fifo g1-m2 group=g1
        recv q.fifo max=3 vis=0
        recv q.fifo max=10 vis=0
        ",
        expect![[r#"
            create q.fifo FifoQueue=true ContentBasedDeduplication=true -> ok
            send q.fifo g1-m1 group=g1   -> seq=1
            send q.fifo g2-m1 group=g2   -> seq=2
            send q.fifo g2-m2 group=g2   -> seq=3
            send q.fifo g3-m1 group=g3   -> seq=4
            send q.fifo g1-m2 group=g1   -> seq=5
            recv q.fifo max=3 vis=0      -> g1-m1 rc=1 h1, g1-m2 rc=1 h2, g2-m1 rc=1 h3
            recv q.fifo max=10 vis=0     -> g3-m1 rc=1 h4, g1-m1 rc=2 h5, g1-m2 rc=2 h6, g2-m1 rc=2 h7, g2-m2 rc=1 h8
        "#]],
    );
}

#[test]
fn a_group_whose_served_messages_were_deleted_keeps_its_place_by_its_new_head() {
    // AWS-recorded: the group's next message has waited since it was sent, so the group is
    // served in its send order; while one served message is still in flight it is not.
    check(
        "
        create q.fifo FifoQueue=true ContentBasedDeduplication=true
        send q.fifo g1-m1 group=g1
        send q.fifo g2-m1 group=g2
        send q.fifo g1-m2 group=g1
        send q.fifo g2-m2 group=g2
        send q.fifo g1-m3 group=g1
        send q.fifo g1-m4 group=g1
        send q.fifo g3-m1 group=g3
        recv q.fifo max=2
        del q.fifo h1
        recv q.fifo max=10 vis=0
        del q.fifo h2
        recv q.fifo max=10
        ",
        expect![[r#"
            create q.fifo FifoQueue=true ContentBasedDeduplication=true -> ok
            send q.fifo g1-m1 group=g1   -> seq=1
            send q.fifo g2-m1 group=g2   -> seq=2
            send q.fifo g1-m2 group=g1   -> seq=3
            send q.fifo g2-m2 group=g2   -> seq=4
            send q.fifo g1-m3 group=g1   -> seq=5
            send q.fifo g1-m4 group=g1   -> seq=6
            send q.fifo g3-m1 group=g3   -> seq=7
            recv q.fifo max=2            -> g1-m1 rc=1 h1, g1-m2 rc=1 h2
            del q.fifo h1                -> removed
            recv q.fifo max=10 vis=0     -> g2-m1 rc=1 h3, g2-m2 rc=1 h4, g3-m1 rc=1 h5
            del q.fifo h2                -> removed
            recv q.fifo max=10           -> g1-m3 rc=1 h6, g1-m4 rc=1 h7, g2-m1 rc=2 h8, g2-m2 rc=2 h9, g3-m1 rc=2 h10
        "#]],
    );
}

#[test]
fn duplicates_within_five_minutes_are_accepted_but_not_stored() {
    check(
        "
        create q.fifo FifoQueue=true
        send q.fifo first group=g dedup=same
        send q.fifo second group=g dedup=same
        send q.fifo third group=h dedup=same
        counts q.fifo
        advance 299
        send q.fifo fourth group=g dedup=same
        advance 1
        send q.fifo fifth group=g dedup=same
        counts q.fifo
        ",
        expect![[r#"
            create q.fifo FifoQueue=true -> ok
            send q.fifo first group=g dedup=same -> seq=1
            send q.fifo second group=g dedup=same -> seq=1
            send q.fifo third group=h dedup=same -> seq=1
            counts q.fifo                -> visible=1 inflight=0 delayed=0
            advance 299                  -> t+299s
            send q.fifo fourth group=g dedup=same -> seq=1
            advance 1                    -> t+300s
            send q.fifo fifth group=g dedup=same -> seq=2
            counts q.fifo                -> visible=2 inflight=0 delayed=0
        "#]],
    );
}

#[test]
fn deduplication_scoped_to_the_group_lets_other_groups_reuse_an_id() {
    check(
        "
        create q.fifo FifoQueue=true DeduplicationScope=messageGroup
        send q.fifo first group=g dedup=same
        send q.fifo second group=h dedup=same
        send q.fifo third group=g dedup=same
        counts q.fifo
        ",
        expect![[r#"
            create q.fifo FifoQueue=true DeduplicationScope=messageGroup -> ok
            send q.fifo first group=g dedup=same -> seq=1
            send q.fifo second group=h dedup=same -> seq=2
            send q.fifo third group=g dedup=same -> seq=1
            counts q.fifo                -> visible=2 inflight=0 delayed=0
        "#]],
    );
}

#[test]
fn content_based_deduplication_uses_the_body() {
    check(
        "
        create q.fifo FifoQueue=true ContentBasedDeduplication=true
        send q.fifo same group=g
        send q.fifo same group=g
        send q.fifo other group=g
        send q.fifo same group=g dedup=explicit
        counts q.fifo
        ",
        expect![[r#"
            create q.fifo FifoQueue=true ContentBasedDeduplication=true -> ok
            send q.fifo same group=g     -> seq=1
            send q.fifo same group=g     -> seq=1
            send q.fifo other group=g    -> seq=2
            send q.fifo same group=g dedup=explicit -> seq=3
            counts q.fifo                -> visible=3 inflight=0 delayed=0
        "#]],
    );
}

#[test]
fn a_retried_receive_attempt_returns_the_same_messages_and_restarts_the_lease() {
    check(
        "
        create q.fifo FifoQueue=true ContentBasedDeduplication=true VisibilityTimeout=30
        send q.fifo a group=g
        send q.fifo b group=g
        recv q.fifo max=2 attempt=try-1
        advance 20
        recv q.fifo max=2 attempt=try-1
        advance 20
        recv q.fifo max=2
        advance 10
        recv q.fifo max=2
        ",
        expect![[r#"
            create q.fifo FifoQueue=true ContentBasedDeduplication=true VisibilityTimeout=30 -> ok
            send q.fifo a group=g        -> seq=1
            send q.fifo b group=g        -> seq=2
            recv q.fifo max=2 attempt=try-1 -> a rc=1 h1, b rc=1 h2
            advance 20                   -> t+20s
            recv q.fifo max=2 attempt=try-1 -> a rc=1 h1, b rc=1 h2
            advance 20                   -> t+40s
            recv q.fifo max=2            -> (empty)
            advance 10                   -> t+50s
            recv q.fifo max=2            -> a rc=2 h3, b rc=2 h4
        "#]],
    );
}

#[test]
fn an_empty_receive_attempt_is_not_replayed_so_a_long_poll_asking_again_gets_what_arrived() {
    check(
        "
        create q.fifo FifoQueue=true ContentBasedDeduplication=true
        recv q.fifo attempt=poll-1
        send q.fifo a group=g
        recv q.fifo attempt=poll-1
        recv q.fifo attempt=poll-1
        ",
        expect![[r#"
            create q.fifo FifoQueue=true ContentBasedDeduplication=true -> ok
            recv q.fifo attempt=poll-1   -> (empty)
            send q.fifo a group=g        -> seq=1
            recv q.fifo attempt=poll-1   -> a rc=1 h1
            recv q.fifo attempt=poll-1   -> a rc=1 h1
        "#]],
    );
}

#[test]
fn an_expired_handle_is_refused_on_a_fifo_queue_in_either_mode() {
    check(
        "
        create q.fifo FifoQueue=true ContentBasedDeduplication=true VisibilityTimeout=30
        send q.fifo a group=g
        recv q.fifo
        advance 30
        del q.fifo h1
        vis q.fifo h1 10
        recv q.fifo
        del q.fifo h2
        stats q.fifo
        ",
        expect![[r#"
            create q.fifo FifoQueue=true ContentBasedDeduplication=true VisibilityTimeout=30 -> ok
            send q.fifo a group=g        -> seq=1
            recv q.fifo                  -> a rc=1 h1
            advance 30                   -> t+30s
            del q.fifo h1                -> error ReceiptHandleExpired("AAAAAAAAAAEAAAGLz-VoAAAAAAAAAAABAAAAAQAAAYvP5WgA3pZCN6sYLz0")
            vis q.fifo h1 10             -> error ReceiptHandleExpired("AAAAAAAAAAEAAAGLz-VoAAAAAAAAAAABAAAAAQAAAYvP5WgA3pZCN6sYLz0")
            recv q.fifo                  -> a rc=2 h2
            del q.fifo h2                -> removed
            stats q.fifo                 -> QueueStats { sent: 1, received: 2, deleted: 1, empty_receives: 0, leases_expired: 1, late_deletes: 1, dead_lettered: 0, dead_lettered_after_late_delete: 0, deleted_within_lease: 1, released_early: 0, extensions: 0, repeat_deletes: 0 }
        "#]],
    );
    check_strict(
        "
        create q.fifo FifoQueue=true ContentBasedDeduplication=true VisibilityTimeout=30
        send q.fifo a group=g
        recv q.fifo
        advance 30
        del q.fifo h1
        ",
        expect![[r#"
            create q.fifo FifoQueue=true ContentBasedDeduplication=true VisibilityTimeout=30 -> ok
            send q.fifo a group=g        -> seq=1
            recv q.fifo                  -> a rc=1 h1
            advance 30                   -> t+30s
            del q.fifo h1                -> error ReceiptHandleExpired("AAAAAAAAAAEAAAGLz-VoAAAAAAAAAAABAAAAAQAAAYvP5WgA3pZCN6sYLz0")
        "#]],
    );
}

#[test]
fn a_fifo_queue_has_no_per_message_delay_and_a_purge_forgets_deduplication_ids() {
    check(
        "
        create q.fifo FifoQueue=True DelaySeconds=5
        send q.fifo a group=g dedup=d1 delay=0
        counts q.fifo
        purge q.fifo
        send q.fifo a group=g dedup=d1
        counts q.fifo
        set q.fifo FifoQueue=true
        create plain FifoQueue=false
        ",
        expect![[r#"
            create q.fifo FifoQueue=True DelaySeconds=5 -> ok
            send q.fifo a group=g dedup=d1 delay=0 -> seq=1
            counts q.fifo                -> visible=0 inflight=0 delayed=1
            purge q.fifo                 -> ok
            send q.fifo a group=g dedup=d1 -> seq=2
            counts q.fifo                -> visible=0 inflight=0 delayed=1
            set q.fifo FifoQueue=true    -> ok
            create plain FifoQueue=false -> error InvalidAttributeName("FifoQueue")
        "#]],
    );
}
