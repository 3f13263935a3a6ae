//! What the engine measures about leases: hold times, late deletes, heartbeats, releases,
//! receive counts, and successful work dumped into a dead-letter queue.

mod script;
use expect_test::expect;
use script::{check, check_strict};

#[test]
fn hold_times_run_from_the_receive_to_the_delete_late_or_not() {
    check(
        "
        create q VisibilityTimeout=30
        send q fast
        send q slow
        recv q max=1
        advance 12
        del q h1
        recv q max=1
        advance 40
        recv q
        del q h2
        del q h3
        report q
        ",
        expect![[r#"
            create q VisibilityTimeout=30 -> ok
            send q fast                  -> ok
            send q slow                  -> ok
            recv q max=1                 -> fast rc=1 h1
            advance 12                   -> t+12s
            del q h1                     -> removed
            recv q max=1                 -> slow rc=1 h2
            advance 40                   -> t+52s
            recv q                       -> slow rc=2 h3
            del q h2                     -> removed (late)
            del q h3                     -> already gone
            report q                     -> hold n=3 p50=12000ms p99=40064ms max=40064ms; within=1 late=1 expired=1 released=0 extensions=0 dlq=0 dlq_after_late=0; receives {1: 1, 2: 1}; extensions/message {0: 2}; oldest Nonems
        "#]],
    );
}

#[test]
fn heartbeats_and_releases_are_counted_per_lease() {
    check(
        "
        create q VisibilityTimeout=30
        send q a
        send q b
        recv q
        advance 10
        vis q h1 30
        advance 10
        vis q h1 30
        vis q h2 0
        del q h1
        report q
        ",
        expect![[r#"
            create q VisibilityTimeout=30 -> ok
            send q a                     -> ok
            send q b                     -> ok
            recv q                       -> a rc=1 h1, b rc=1 h2
            advance 10                   -> t+10s
            vis q h1 30                  -> ok
            advance 10                   -> t+20s
            vis q h1 30                  -> ok
            vis q h2 0                   -> ok
            del q h1                     -> removed
            report q                     -> hold n=1 p50=20032ms p99=20032ms max=20032ms; within=1 late=0 expired=0 released=1 extensions=2 dlq=0 dlq_after_late=0; receives {1: 1}; extensions/message {2: 1}; oldest Some(20000)ms
        "#]],
    );
}

#[test]
fn successful_work_reaching_the_dlq_is_counted_as_the_dlq_mirage() {
    check_strict(
        r#"
        create dlq
        create src VisibilityTimeout=30 RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":2}
        send src done-but-late
        recv src
        advance 35
        recv src
        del src h1
        advance 35
        del src h2
        advance 1
        recv src
        report src
        counts dlq
        "#,
        expect![[r#"
            create dlq                   -> ok
            create src VisibilityTimeout=30 RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":2} -> ok
            send src done-but-late       -> ok
            recv src                     -> done-but-late rc=1 h1
            advance 35                   -> t+35s
            recv src                     -> done-but-late rc=2 h2
            del src h1                   -> kept (late)
            advance 35                   -> t+70s
            del src h2                   -> kept (late)
            advance 1                    -> t+71s
            recv src                     -> (empty)
            report src                   -> hold n=2 p50=34944ms p99=34944ms max=34944ms; within=0 late=2 expired=2 released=0 extensions=0 dlq=1 dlq_after_late=1; receives {2: 1}; extensions/message {}; oldest Nonems
            counts dlq                   -> visible=1 inflight=0 delayed=0
        "#]],
    );
}

#[test]
fn a_retried_delete_through_the_same_handle_is_neither_a_hold_nor_a_repeat() {
    check(
        "
        create q VisibilityTimeout=30
        send q a
        recv q
        advance 5
        del q h1
        del q h1
        del q h1
        report q
        stats q
        ",
        expect![[r#"
            create q VisibilityTimeout=30 -> ok
            send q a                     -> ok
            recv q                       -> a rc=1 h1
            advance 5                    -> t+5s
            del q h1                     -> removed
            del q h1                     -> already gone
            del q h1                     -> already gone
            report q                     -> hold n=1 p50=5008ms p99=5008ms max=5008ms; within=1 late=0 expired=0 released=0 extensions=0 dlq=0 dlq_after_late=0; receives {1: 1}; extensions/message {0: 1}; oldest Nonems
            stats q                      -> QueueStats { sent: 1, received: 1, deleted: 1, empty_receives: 0, leases_expired: 0, late_deletes: 0, dead_lettered: 0, dead_lettered_after_late_delete: 0, deleted_within_lease: 1, released_early: 0, extensions: 0, repeat_deletes: 0 }
        "#]],
    );
}

#[test]
fn a_visibility_change_that_ends_the_lease_sooner_is_a_release_not_a_heartbeat() {
    check(
        "
        create q VisibilityTimeout=60
        send q a
        recv q
        advance 5
        vis q h1 10
        vis q h1 120
        report q
        ",
        expect![[r#"
            create q VisibilityTimeout=60 -> ok
            send q a                     -> ok
            recv q                       -> a rc=1 h1
            advance 5                    -> t+5s
            vis q h1 10                  -> ok
            vis q h1 120                 -> ok
            report q                     -> hold none; within=0 late=0 expired=0 released=1 extensions=1 dlq=0 dlq_after_late=0; receives {}; extensions/message {}; oldest Some(5000)ms
        "#]],
    );
}
