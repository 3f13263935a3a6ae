//! Dead-letter queues, redrive policies and message move tasks.

mod script;
use expect_test::expect;
use script::check;

#[test]
fn redrive_policies_are_validated() {
    check(
        r#"
        create dlq
        create src RedrivePolicy=not-json
        create src RedrivePolicy={"maxReceiveCount":3}
        create src RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq"}
        create src RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":0}
        create src RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":1001}
        create src RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:nope","maxReceiveCount":3}
        create f.fifo FifoQueue=true RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":3}
        create src RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":"3"}
        attrs src RedrivePolicy
        sources dlq
        "#,
        expect![[r#"
            create dlq                   -> ok
            create src RedrivePolicy=not-json -> error InvalidParameterValue("Value not-json for parameter RedrivePolicy is invalid. Reason: Redrive policy is not a valid JSON map.")
            create src RedrivePolicy={"maxReceiveCount":3} -> error InvalidParameterValue("Value {\"maxReceiveCount\":3} for parameter RedrivePolicy is invalid. Reason: Redrive policy does not contain mandatory attribute: deadLetterTargetArn.")
            create src RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq"} -> error InvalidParameterValue("Value {\"deadLetterTargetArn\":\"arn:aws:sqs:us-east-1:000000000000:dlq\"} for parameter RedrivePolicy is invalid. Reason: Redrive policy does not contain mandatory attribute: maxReceiveCount.")
            create src RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":0} -> error InvalidParameterValue("Value {\"deadLetterTargetArn\":\"arn:aws:sqs:us-east-1:000000000000:dlq\",\"maxReceiveCount\":0} for parameter RedrivePolicy is invalid. Reason: Invalid value for maxReceiveCount, valid values are from 1 to 1000 both inclusive.")
            create src RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":1001} -> error InvalidParameterValue("Value {\"deadLetterTargetArn\":\"arn:aws:sqs:us-east-1:000000000000:dlq\",\"maxReceiveCount\":1001} for parameter RedrivePolicy is invalid. Reason: Invalid value for maxReceiveCount, valid values are from 1 to 1000 both inclusive.")
            create src RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:nope","maxReceiveCount":3} -> error InvalidParameterValue("Value {\"deadLetterTargetArn\":\"arn:aws:sqs:us-east-1:000000000000:nope\",\"maxReceiveCount\":3} for parameter RedrivePolicy is invalid. Reason: Dead letter target does not exist.")
            create f.fifo FifoQueue=true RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":3} -> error InvalidParameterValue("Value {\"deadLetterTargetArn\":\"arn:aws:sqs:us-east-1:000000000000:dlq\",\"maxReceiveCount\":3} for parameter RedrivePolicy is invalid. Reason: Dead-letter queue must be same type of queue as the source.")
            create src RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":"3"} -> ok
            attrs src RedrivePolicy      -> RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":3}
            sources dlq                  -> src
        "#]],
    );
}

#[test]
fn the_redrive_allow_policy_decides_which_sources_may_use_a_dlq() {
    check(
        r#"
        create closed RedriveAllowPolicy={"redrivePermission":"denyAll"}
        create picky RedriveAllowPolicy={"redrivePermission":"byQueue","sourceQueueArns":["arn:aws:sqs:us-east-1:000000000000:chosen"]}
        create bad RedriveAllowPolicy={"redrivePermission":"byQueue"}
        create bad RedriveAllowPolicy={"redrivePermission":"allowAll","sourceQueueArns":["x"]}
        create a RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:closed","maxReceiveCount":3}
        create b RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:picky","maxReceiveCount":3}
        create chosen RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:picky","maxReceiveCount":3}
        attrs picky RedriveAllowPolicy
        "#,
        expect![[r#"
            create closed RedriveAllowPolicy={"redrivePermission":"denyAll"} -> ok
            create picky RedriveAllowPolicy={"redrivePermission":"byQueue","sourceQueueArns":["arn:aws:sqs:us-east-1:000000000000:chosen"]} -> ok
            create bad RedriveAllowPolicy={"redrivePermission":"byQueue"} -> error InvalidParameterValue("Value {\"redrivePermission\":\"byQueue\"} for parameter RedriveAllowPolicy is invalid. Reason: Amazon SQS can't create the redrive allow policy. To specify one or more source queues, you must set redrivePermission to byQueue and list 1 to 10 sourceQueueArns.")
            create bad RedriveAllowPolicy={"redrivePermission":"allowAll","sourceQueueArns":["x"]} -> error InvalidParameterValue("Value {\"redrivePermission\":\"allowAll\",\"sourceQueueArns\":[\"x\"]} for parameter RedriveAllowPolicy is invalid. Reason: Amazon SQS can't create the redrive allow policy. To specify one or more source queues, you must set redrivePermission to byQueue.")
            create a RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:closed","maxReceiveCount":3} -> error InvalidParameterValue("Value {\"deadLetterTargetArn\":\"arn:aws:sqs:us-east-1:000000000000:closed\",\"maxReceiveCount\":3} for parameter RedrivePolicy is invalid. Reason: Queue arn:aws:sqs:us-east-1:000000000000:a is not allowed to use arn:aws:sqs:us-east-1:000000000000:closed as its dead-letter queue by its RedriveAllowPolicy.")
            create b RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:picky","maxReceiveCount":3} -> error InvalidParameterValue("Value {\"deadLetterTargetArn\":\"arn:aws:sqs:us-east-1:000000000000:picky\",\"maxReceiveCount\":3} for parameter RedrivePolicy is invalid. Reason: Queue arn:aws:sqs:us-east-1:000000000000:b is not allowed to use arn:aws:sqs:us-east-1:000000000000:picky as its dead-letter queue by its RedriveAllowPolicy.")
            create chosen RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:picky","maxReceiveCount":3} -> ok
            attrs picky RedriveAllowPolicy -> RedriveAllowPolicy={"redrivePermission":"byQueue","sourceQueueArns":["arn:aws:sqs:us-east-1:000000000000:chosen"]}
        "#]],
    );
}

#[test]
fn a_message_received_max_receive_count_times_moves_on_the_next_receive() {
    check(
        r#"
        create dlq
        create src VisibilityTimeout=10 RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":2}
        send src poison
        send src fine
        recv src max=1
        advance 10
        recv src max=1
        advance 10
        recv src
        counts dlq
        recv dlq
        stats src
        "#,
        expect![[r#"
            create dlq                   -> ok
            create src VisibilityTimeout=10 RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":2} -> ok
            send src poison              -> ok
            send src fine                -> ok
            recv src max=1               -> poison rc=1 h1
            advance 10                   -> t+10s
            recv src max=1               -> poison rc=2 h2
            advance 10                   -> t+20s
            recv src                     -> fine rc=1 h3
            counts dlq                   -> visible=1 inflight=0 delayed=0
            recv dlq                     -> poison rc=3 h4 from=src
            stats src                    -> QueueStats { sent: 2, received: 3, deleted: 0, empty_receives: 0, leases_expired: 2, late_deletes: 0, dead_lettered: 1, dead_lettered_after_late_delete: 0, deleted_within_lease: 0, released_early: 0, extensions: 0, repeat_deletes: 0 }
        "#]],
    );
}

/// A receive locks its dead-letter queue only when a message it takes is due to move: one
/// that takes the messages before a due one leaves it in place, and the next moves it.
#[test]
fn a_receive_moves_only_the_due_messages_it_reaches() {
    check(
        r#"
        create dlq
        create src VisibilityTimeout=10 RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":2}
        send src early
        send src poison
        recv src max=1
        recv src max=1 vis=0
        recv src max=1 vis=0
        advance 10
        recv src max=1
        counts dlq
        recv src max=1
        counts dlq
        recv dlq
        "#,
        expect![[r#"
            create dlq                   -> ok
            create src VisibilityTimeout=10 RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":2} -> ok
            send src early               -> ok
            send src poison              -> ok
            recv src max=1               -> early rc=1 h1
            recv src max=1 vis=0         -> poison rc=1 h2
            recv src max=1 vis=0         -> poison rc=2 h3
            advance 10                   -> t+10s
            recv src max=1               -> early rc=2 h4
            counts dlq                   -> visible=0 inflight=0 delayed=0
            recv src max=1               -> (empty)
            counts dlq                   -> visible=1 inflight=0 delayed=0
            recv dlq                     -> poison rc=3 h5 from=src
        "#]],
    );
}

/// A RedrivePolicy may name the queue itself: a message past maxReceiveCount goes back into
/// it as a dead letter (from itself) rather than being lost, and the receive locks only it.
#[test]
fn a_queue_that_is_its_own_dead_letter_queue_keeps_its_messages() {
    check(
        r#"
        create src VisibilityTimeout=10
        set src RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:src","maxReceiveCount":1}
        send src poison
        recv src
        advance 10
        recv src
        counts src
        recv src
        "#,
        expect![[r#"
            create src VisibilityTimeout=10 -> ok
            set src RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:src","maxReceiveCount":1} -> ok
            send src poison              -> ok
            recv src                     -> poison rc=1 h1
            advance 10                   -> t+10s
            recv src                     -> (empty)
            counts src                   -> visible=1 inflight=0 delayed=0
            recv src                     -> (empty)
        "#]],
    );
}

#[test]
fn a_deleted_dlq_turns_dead_lettering_off_instead_of_losing_messages() {
    check(
        r#"
        create dlq
        create src VisibilityTimeout=10 RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":1}
        send src keep
        recv src
        drop dlq
        advance 10
        recv src
        "#,
        expect![[r#"
            create dlq                   -> ok
            create src VisibilityTimeout=10 RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":1} -> ok
            send src keep                -> ok
            recv src                     -> keep rc=1 h1
            drop dlq                     -> ok
            advance 10                   -> t+10s
            recv src                     -> keep rc=2 h2
        "#]],
    );
}

#[test]
fn a_move_task_returns_messages_to_their_source_with_a_fresh_receive_count() {
    check(
        r#"
        create dlq
        create src VisibilityTimeout=10 RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":1}
        send src m1
        send src m2
        recv src
        advance 10
        recv src
        counts dlq
        move src
        move dlq
        move dlq
        tasks dlq
        counts dlq
        recv src
        stats dlq
        "#,
        expect![[r#"
            create dlq                   -> ok
            create src VisibilityTimeout=10 RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":1} -> ok
            send src m1                  -> ok
            send src m2                  -> ok
            recv src                     -> m1 rc=1 h1, m2 rc=1 h2
            advance 10                   -> t+10s
            recv src                     -> (empty)
            counts dlq                   -> visible=2 inflight=0 delayed=0
            move src                     -> error InvalidParameterValue("Source queue must be configured as a Dead Letter Queue.")
            move dlq                     -> t1
            move dlq                     -> t2
            tasks dlq                    -> COMPLETED moved=0/0, COMPLETED moved=2/2
            counts dlq                   -> visible=0 inflight=0 delayed=0
            recv src                     -> m1 rc=1 h3, m2 rc=1 h4
            stats dlq                    -> QueueStats { sent: 0, received: 0, deleted: 0, empty_receives: 0, leases_expired: 0, late_deletes: 0, dead_lettered: 0, dead_lettered_after_late_delete: 0, deleted_within_lease: 0, released_early: 0, extensions: 0, repeat_deletes: 0 }
        "#]],
    );
}

#[test]
fn a_move_task_honours_its_rate_and_can_be_cancelled() {
    check(
        r#"
        create dlq
        create other
        create src VisibilityTimeout=1 RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":1}
        send src m1
        send src m2
        send src m3
        send src m4
        recv src
        advance 1
        recv src
        move dlq dest=other rate=1
        tasks dlq
        advance 2
        tasks dlq
        cancel t1
        tasks dlq
        cancel t1
        counts other
        counts dlq
        move dlq dest=nope
        move dlq rate=501
        "#,
        expect![[r#"
            create dlq                   -> ok
            create other                 -> ok
            create src VisibilityTimeout=1 RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":1} -> ok
            send src m1                  -> ok
            send src m2                  -> ok
            send src m3                  -> ok
            send src m4                  -> ok
            recv src                     -> m1 rc=1 h1, m2 rc=1 h2, m3 rc=1 h3, m4 rc=1 h4
            advance 1                    -> t+1s
            recv src                     -> (empty)
            move dlq dest=other rate=1   -> t1
            tasks dlq                    -> RUNNING moved=0/4
            advance 2                    -> t+3s
            tasks dlq                    -> RUNNING moved=2/4
            cancel t1                    -> moved=2
            tasks dlq                    -> CANCELLED moved=2/4
            cancel t1                    -> error InvalidParameterValue("Only active tasks can be cancelled.")
            counts other                 -> visible=2 inflight=0 delayed=0
            counts dlq                   -> visible=2 inflight=0 delayed=0
            move dlq dest=nope           -> error ResourceNotFound("The resource that you specified for the DestinationArn parameter doesn't exist.")
            move dlq rate=501            -> error InvalidParameterValue("Value 501 for parameter MaxNumberOfMessagesPerSecond is invalid. Reason: Must be between 1 and 500.")
        "#]],
    );
}

#[test]
fn a_move_task_fails_when_a_destination_is_gone() {
    check(
        r#"
        create dlq
        create src VisibilityTimeout=1 RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":1}
        create keeper RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":1}
        send src m1
        recv src
        advance 1
        recv src
        drop src
        move dlq
        tasks dlq
        counts dlq
        "#,
        expect![[r#"
            create dlq                   -> ok
            create src VisibilityTimeout=1 RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":1} -> ok
            create keeper RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":1} -> ok
            send src m1                  -> ok
            recv src                     -> m1 rc=1 h1
            advance 1                    -> t+1s
            recv src                     -> (empty)
            drop src                     -> ok
            move dlq                     -> t1
            tasks dlq                    -> FAILED moved=0/1 (AWS.SimpleQueueService.NonExistentQueue)
            counts dlq                   -> visible=1 inflight=0 delayed=0
        "#]],
    );
}

#[test]
fn a_move_task_to_a_queue_of_the_other_type_is_refused() {
    // A standard message has no group to take its place in a FIFO queue by.
    check(
        r#"
        create dlq
        create src RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":1}
        create other.fifo FifoQueue=true
        send dlq m1
        move dlq dest=other.fifo
        counts dlq
        "#,
        expect![[r#"
            create dlq                   -> ok
            create src RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":1} -> ok
            create other.fifo FifoQueue=true -> ok
            send dlq m1                  -> ok
            move dlq dest=other.fifo     -> error InvalidParameterValue("The destination queue must be of the same type as the source queue.")
            counts dlq                   -> visible=1 inflight=0 delayed=0
        "#]],
    );
}

/// A RedrivePolicy is checked against its target when it is set, not each time another
/// attribute changes: once the dead-letter queue is gone (dead-lettering is off), the source's
/// other attributes still change (found by the PostgreSQL contention test, which loads only
/// the queues a command names).
#[test]
fn other_attributes_change_while_the_dead_letter_target_is_gone() {
    check(
        r#"
        create dlq
        create src RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":3}
        drop dlq
        set src VisibilityTimeout=5
        attrs src VisibilityTimeout
        set src RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":2}
        "#,
        expect![[r#"
            create dlq                   -> ok
            create src RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":3} -> ok
            drop dlq                     -> ok
            set src VisibilityTimeout=5  -> ok
            attrs src VisibilityTimeout  -> VisibilityTimeout=5
            set src RedrivePolicy={"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":2} -> error InvalidParameterValue("Value {\"deadLetterTargetArn\":\"arn:aws:sqs:us-east-1:000000000000:dlq\",\"maxReceiveCount\":2} for parameter RedrivePolicy is invalid. Reason: Dead letter target does not exist.")
        "#]],
    );
}

/// Two queues that are each other's dead-letter queue: a message moved to one whose own
/// redrive policy would move it back at its next receive owes that queue's long polls no
/// wake-up (they would bounce it between them without end); one it can hand out does.
#[test]
fn a_move_wakes_the_dead_letter_queue_only_for_what_it_can_hand_out() {
    use leasehold_engine::{Engine, EngineConfig, ManualClock, NewMessage, ReceiveRequest};
    use std::sync::Arc;

    let redrive = |target: &str, max: u32| {
        let arn = format!("arn:aws:sqs:us-east-1:000000000000:{target}");
        let policy = format!(r#"{{"deadLetterTargetArn":"{arn}","maxReceiveCount":{max}}}"#);
        vec![("RedrivePolicy".to_string(), policy)]
    };
    let bounce = ReceiveRequest {
        visibility_s: Some(0),
        ..ReceiveRequest::up_to(10)
    };
    let moved_by = |b_max: u32| {
        let clock = ManualClock::new(1_000_000);
        let mut engine = Engine::new(Arc::new(clock), EngineConfig::default());
        engine.create_queue("a", &[], &[]).unwrap();
        engine.create_queue("b", &redrive("a", b_max), &[]).unwrap();
        engine.set_attributes("a", &redrive("b", 1)).unwrap();
        engine.send("a", NewMessage::new("m")).unwrap();
        assert_eq!(engine.receive("a", &bounce).unwrap().len(), 1);
        let received = engine.receive_striped("a", &bounce, &mut |_| {}).unwrap();
        assert!(received.handout.is_empty());
        received.dead_lettered
    };
    assert_eq!(moved_by(1), None, "b would move it straight back");
    assert_eq!(moved_by(2), Some(("b".to_string(), 1)));
}
