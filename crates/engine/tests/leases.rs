//! Leases, receipt handles and visibility: the heart of SQS, driven by a manual clock.

mod script;
use expect_test::expect;
use script::{check, check_strict};

#[test]
fn a_received_message_is_hidden_until_its_lease_ends() {
    check(
        "
        create q
        send q a
        recv q vis=30
        recv q
        counts q
        advance 29
        recv q
        advance 1
        counts q
        recv q
        ",
        expect![[r#"
            create q                     -> ok
            send q a                     -> ok
            recv q vis=30                -> a rc=1 h1
            recv q                       -> (empty)
            counts q                     -> visible=0 inflight=1 delayed=0
            advance 29                   -> t+29s
            recv q                       -> (empty)
            advance 1                    -> t+30s
            counts q                     -> visible=1 inflight=0 delayed=0
            recv q                       -> a rc=2 h2
        "#]],
    );
}

#[test]
fn every_receive_issues_a_new_handle_and_counts_the_receive() {
    check(
        "
        create q VisibilityTimeout=10
        send q a
        recv q
        advance 10
        recv q
        advance 10
        recv q
        ",
        expect![[r#"
            create q VisibilityTimeout=10 -> ok
            send q a                     -> ok
            recv q                       -> a rc=1 h1
            advance 10                   -> t+10s
            recv q                       -> a rc=2 h2
            advance 10                   -> t+20s
            recv q                       -> a rc=3 h3
        "#]],
    );
}

#[test]
fn change_visibility_sets_the_lease_from_now_and_zero_releases() {
    check(
        "
        create q
        send q a
        recv q vis=30
        advance 20
        vis q h1 30
        advance 29
        recv q
        advance 1
        recv q
        vis q h2 0
        recv q
        ",
        expect![[r#"
            create q                     -> ok
            send q a                     -> ok
            recv q vis=30                -> a rc=1 h1
            advance 20                   -> t+20s
            vis q h1 30                  -> ok
            advance 29                   -> t+49s
            recv q                       -> (empty)
            advance 1                    -> t+50s
            recv q                       -> a rc=2 h2
            vis q h2 0                   -> ok
            recv q                       -> a rc=3 h3
        "#]],
    );
}

#[test]
fn a_visibility_change_does_not_carry_over_to_the_next_receive() {
    check(
        "
        create q VisibilityTimeout=30
        send q a
        recv q
        vis q h1 100
        vis q h1 0
        recv q
        advance 30
        recv q
        ",
        expect![[r#"
            create q VisibilityTimeout=30 -> ok
            send q a                     -> ok
            recv q                       -> a rc=1 h1
            vis q h1 100                 -> ok
            vis q h1 0                   -> ok
            recv q                       -> a rc=2 h2
            advance 30                   -> t+30s
            recv q                       -> a rc=3 h3
        "#]],
    );
}

#[test]
fn the_total_lease_of_one_receive_never_passes_twelve_hours() {
    check(
        "
        create q
        send q a
        recv q vis=43200
        advance 3600
        vis q h1 39600
        vis q h1 39601
        vis q h1 43201
        advance 39599
        vis q h1 1
        vis q h1 2
        recv q vis=43201
        ",
        expect![[r#"
            create q                     -> ok
            send q a                     -> ok
            recv q vis=43200             -> a rc=1 h1
            advance 3600                 -> t+3600s
            vis q h1 39600               -> ok
            vis q h1 39601               -> error InvalidParameterValue("Value 39601 for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds]")
            vis q h1 43201               -> error InvalidParameterValue("Value 43201 for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds]")
            advance 39599                -> t+43199s
            vis q h1 1                   -> ok
            vis q h1 2                   -> error InvalidParameterValue("Value 2 for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds]")
            recv q vis=43201             -> error InvalidParameterValue("Value 43201 for parameter VisibilityTimeout is invalid. Reason: Must be >= 0 and <= 43200, if provided.")
        "#]],
    );
}

#[test]
fn aws_mode_any_issued_handle_deletes_and_the_late_delete_is_counted() {
    check(
        "
        create q VisibilityTimeout=30
        send q a
        recv q
        advance 30
        recv q
        del q h1
        recv q
        del q h2
        del q h1
        stats q
        ",
        expect![[r#"
            create q VisibilityTimeout=30 -> ok
            send q a                     -> ok
            recv q                       -> a rc=1 h1
            advance 30                   -> t+30s
            recv q                       -> a rc=2 h2
            del q h1                     -> removed (late)
            recv q                       -> (empty)
            del q h2                     -> already gone
            del q h1                     -> already gone
            stats q                      -> QueueStats { sent: 1, received: 2, deleted: 1, empty_receives: 1, leases_expired: 1, late_deletes: 1, dead_lettered: 0, dead_lettered_after_late_delete: 0, deleted_within_lease: 0, released_early: 0, extensions: 0, repeat_deletes: 1 }
        "#]],
    );
}

#[test]
fn aws_mode_change_visibility_on_an_expired_lease_succeeds_and_after_delete_fails() {
    check(
        "
        create q VisibilityTimeout=30
        send q a
        recv q
        advance 31
        vis q h1 60
        recv q
        del q h1
        vis q h1 60
        ",
        expect![[r#"
            create q VisibilityTimeout=30 -> ok
            send q a                     -> ok
            recv q                       -> a rc=1 h1
            advance 31                   -> t+31s
            vis q h1 60                  -> ok
            recv q                       -> (empty)
            del q h1                     -> removed
            vis q h1 60                  -> error MessageNotAvailable("AAAAAAAAAAEAAAGLz-VoAAAAAAAAAAABAAAAAQAAAYvP5WgA3pZCN6sYLz0")
        "#]],
    );
}

#[test]
fn strict_mode_a_stale_handle_deletes_nothing_but_is_counted_late() {
    check_strict(
        "
        create q VisibilityTimeout=30
        send q a
        recv q
        advance 30
        recv q
        del q h1
        counts q
        vis q h1 60
        vis q h2 60
        del q h2
        counts q
        stats q
        ",
        expect![[r#"
            create q VisibilityTimeout=30 -> ok
            send q a                     -> ok
            recv q                       -> a rc=1 h1
            advance 30                   -> t+30s
            recv q                       -> a rc=2 h2
            del q h1                     -> kept (late)
            counts q                     -> visible=0 inflight=1 delayed=0
            vis q h1 60                  -> error MessageNotInflight("AAAAAAAAAAEAAAGLz-VoAAAAAAAAAAABAAAAAQAAAYvP5WgA3pZCN6sYLz0")
            vis q h2 60                  -> ok
            del q h2                     -> removed
            counts q                     -> visible=0 inflight=0 delayed=0
            stats q                      -> QueueStats { sent: 1, received: 2, deleted: 1, empty_receives: 0, leases_expired: 1, late_deletes: 1, dead_lettered: 0, dead_lettered_after_late_delete: 0, deleted_within_lease: 1, released_early: 0, extensions: 1, repeat_deletes: 0 }
        "#]],
    );
}

#[test]
fn strict_mode_an_expired_current_handle_is_not_in_flight() {
    check_strict(
        "
        create q VisibilityTimeout=30
        send q a
        recv q
        advance 30
        vis q h1 10
        del q h1
        counts q
        ",
        expect![[r#"
            create q VisibilityTimeout=30 -> ok
            send q a                     -> ok
            recv q                       -> a rc=1 h1
            advance 30                   -> t+30s
            vis q h1 10                  -> error MessageNotInflight("AAAAAAAAAAEAAAGLz-VoAAAAAAAAAAABAAAAAQAAAYvP5WgA3pZCN6sYLz0")
            del q h1                     -> kept (late)
            counts q                     -> visible=1 inflight=0 delayed=0
        "#]],
    );
}

#[test]
fn a_handle_from_another_queue_or_a_recreated_queue_is_invalid() {
    check(
        "
        create q
        create other
        send q a
        recv q
        del other h1
        vis other h1 5
        drop q
        advance 61
        create q
        del q h1
        ",
        expect![[r#"
            create q                     -> ok
            create other                 -> ok
            send q a                     -> ok
            recv q                       -> a rc=1 h1
            del other h1                 -> error ReceiptHandleIsInvalid("AAAAAAAAAAEAAAGLz-VoAAAAAAAAAAABAAAAAQAAAYvP5WgA3pZCN6sYLz0")
            vis other h1 5               -> error ReceiptHandleIsInvalid("AAAAAAAAAAEAAAGLz-VoAAAAAAAAAAABAAAAAQAAAYvP5WgA3pZCN6sYLz0")
            drop q                       -> ok
            advance 61                   -> t+61s
            create q                     -> ok
            del q h1                     -> error ReceiptHandleIsInvalid("AAAAAAAAAAEAAAGLz-VoAAAAAAAAAAABAAAAAQAAAYvP5WgA3pZCN6sYLz0")
        "#]],
    );
}

#[test]
fn a_receive_with_zero_visibility_leaves_the_message_receivable() {
    check(
        "
        create q
        send q a
        recv q vis=0
        recv q vis=0
        counts q
        ",
        expect![[r#"
            create q                     -> ok
            send q a                     -> ok
            recv q vis=0                 -> a rc=1 h1
            recv q vis=0                 -> a rc=2 h2
            counts q                     -> visible=1 inflight=0 delayed=0
        "#]],
    );
}
