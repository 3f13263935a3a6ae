//! Queue life cycle, attributes, delays, retention and purge, driven by a manual clock.

mod script;
use expect_test::expect;
use script::check;

#[test]
fn create_is_idempotent_for_equal_attributes_and_refuses_different_ones() {
    check(
        "
        create q VisibilityTimeout=45
        create q VisibilityTimeout=45
        create q
        create q VisibilityTimeout=46
        create q DelaySeconds=0
        create q DelaySeconds=5
        ",
        expect![[r#"
            create q VisibilityTimeout=45 -> ok
            create q VisibilityTimeout=45 -> ok
            create q                     -> ok
            create q VisibilityTimeout=46 -> error QueueAlreadyExists("VisibilityTimeout")
            create q DelaySeconds=0      -> ok
            create q DelaySeconds=5      -> error QueueAlreadyExists("DelaySeconds")
        "#]],
    );
}

#[test]
fn queue_names_and_attribute_ranges_are_enforced_and_change_nothing() {
    check(
        "
        create bad.name
        create q VisibilityTimeout=43201
        create q MessageRetentionPeriod=59
        create q MaximumMessageSize=1023
        create q DelaySeconds=901
        create q ReceiveMessageWaitTimeSeconds=21
        create q Bogus=1
        create q FifoQueue=maybe
        attrs q
        create q
        set q VisibilityTimeout=10 DelaySeconds=-1
        attrs q VisibilityTimeout DelaySeconds
        set q QueueArn=x
        attrs q Nope
        ",
        expect![[r#"
            create bad.name              -> error InvalidParameterValue("Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length")
            create q VisibilityTimeout=43201 -> error InvalidAttributeValue("VisibilityTimeout")
            create q MessageRetentionPeriod=59 -> error InvalidAttributeValue("MessageRetentionPeriod")
            create q MaximumMessageSize=1023 -> error InvalidAttributeValue("MaximumMessageSize")
            create q DelaySeconds=901    -> error InvalidAttributeValue("DelaySeconds")
            create q ReceiveMessageWaitTimeSeconds=21 -> error InvalidAttributeValue("ReceiveMessageWaitTimeSeconds")
            create q Bogus=1             -> error InvalidAttributeName("Bogus")
            create q FifoQueue=maybe     -> error InvalidAttributeValue("FifoQueue")
            attrs q                      -> error QueueDoesNotExist
            create q                     -> ok
            set q VisibilityTimeout=10 DelaySeconds=-1 -> error InvalidAttributeValue("DelaySeconds")
            attrs q VisibilityTimeout DelaySeconds -> DelaySeconds=0 VisibilityTimeout=30
            set q QueueArn=x             -> error InvalidAttributeName("QueueArn")
            attrs q Nope                 -> error InvalidAttributeName("Nope")
        "#]],
    );
}

#[test]
fn get_queue_attributes_reports_counts_and_defaults() {
    check(
        "
        create q
        send q a
        send q b
        send q c delay=10
        recv q max=1
        attrs q
        ",
        expect![[r#"
            create q                     -> ok
            send q a                     -> ok
            send q b                     -> ok
            send q c delay=10            -> ok
            recv q max=1                 -> a rc=1 h1
            attrs q                      -> ApproximateNumberOfMessages=1 ApproximateNumberOfMessagesDelayed=1 ApproximateNumberOfMessagesNotVisible=1 CreatedTimestamp=1700000000 DelaySeconds=0 LastModifiedTimestamp=1700000000 MaximumMessageSize=1048576 MessageRetentionPeriod=345600 QueueArn=arn:aws:sqs:us-east-1:000000000000:q ReceiveMessageWaitTimeSeconds=0 SqsManagedSseEnabled=true VisibilityTimeout=30
        "#]],
    );
}

/// As AWS answers (LocalStack's `test_sse_queue_attributes`, recorded on AWS): SSE-SQS on by
/// default; SSE-KMS's key replaces it, SSE-SQS replaces SSE-KMS; both at once are refused.
#[test]
fn encryption_at_rest_is_on_by_default_and_one_kind_at_a_time() {
    check(
        "
        create q
        attrs q SqsManagedSseEnabled KmsMasterKeyId
        set q KmsMasterKeyId=testKeyId KmsDataKeyReusePeriodSeconds=6000
        attrs q SqsManagedSseEnabled KmsMasterKeyId KmsDataKeyReusePeriodSeconds
        set q SqsManagedSseEnabled=true KmsMasterKeyId=other
        set q SqsManagedSseEnabled=true
        attrs q SqsManagedSseEnabled KmsMasterKeyId
        set q SqsManagedSseEnabled=false
        attrs q SqsManagedSseEnabled
        create clear SqsManagedSseEnabled=false
        attrs clear SqsManagedSseEnabled
        ",
        expect![[r#"
            create q                     -> ok
            attrs q SqsManagedSseEnabled KmsMasterKeyId -> SqsManagedSseEnabled=true
            set q KmsMasterKeyId=testKeyId KmsDataKeyReusePeriodSeconds=6000 -> ok
            attrs q SqsManagedSseEnabled KmsMasterKeyId KmsDataKeyReusePeriodSeconds -> KmsDataKeyReusePeriodSeconds=6000 KmsMasterKeyId=testKeyId SqsManagedSseEnabled=false
            set q SqsManagedSseEnabled=true KmsMasterKeyId=other -> error InvalidAttributeValueReason("Invalid value for the parameter SqsManagedSseEnabled. Reason: You can use one type of server-side encryption (SSE) at one time. You can either enable KMS SSE or SQS SSE.")
            set q SqsManagedSseEnabled=true -> ok
            attrs q SqsManagedSseEnabled KmsMasterKeyId -> SqsManagedSseEnabled=true
            set q SqsManagedSseEnabled=false -> ok
            attrs q SqsManagedSseEnabled -> SqsManagedSseEnabled=false
            create clear SqsManagedSseEnabled=false -> ok
            attrs clear SqsManagedSseEnabled -> SqsManagedSseEnabled=false
        "#]],
    );
}

#[test]
fn delayed_messages_wait_their_delay_per_message_or_queue() {
    check(
        "
        create q DelaySeconds=5
        send q queued
        send q mine delay=0
        send q late delay=20
        recv q
        advance 5
        counts q
        recv q
        advance 15
        recv q
        send q toolong delay=901
        ",
        expect![[r#"
            create q DelaySeconds=5      -> ok
            send q queued                -> ok
            send q mine delay=0          -> ok
            send q late delay=20         -> ok
            recv q                       -> mine rc=1 h1
            advance 5                    -> t+5s
            counts q                     -> visible=1 inflight=1 delayed=1
            recv q                       -> queued rc=1 h2
            advance 15                   -> t+20s
            recv q                       -> late rc=1 h3
            send q toolong delay=901     -> error InvalidParameterValue("Value 901 for parameter DelaySeconds is invalid. Reason: DelaySeconds must be >= 0 and <= 900.")
        "#]],
    );
}

#[test]
fn messages_past_retention_are_never_delivered_and_are_dropped() {
    check(
        "
        create q MessageRetentionPeriod=60
        send q old
        advance 30
        send q young
        recv q max=1 vis=5
        advance 30
        counts q
        recv q
        advance 30
        counts q
        ",
        expect![[r#"
            create q MessageRetentionPeriod=60 -> ok
            send q old                   -> ok
            advance 30                   -> t+30s
            send q young                 -> ok
            recv q max=1 vis=5           -> old rc=1 h1
            advance 30                   -> t+60s
            counts q                     -> visible=1 inflight=0 delayed=0
            recv q                       -> young rc=1 h2
            advance 30                   -> t+90s
            counts q                     -> visible=0 inflight=0 delayed=0
        "#]],
    );
}

#[test]
fn purge_empties_the_queue_once_a_minute() {
    check(
        "
        create q
        send q a
        send q b
        recv q max=1
        purge q
        counts q
        purge q
        advance 60
        purge q
        ",
        expect![[r#"
            create q                     -> ok
            send q a                     -> ok
            send q b                     -> ok
            recv q max=1                 -> a rc=1 h1
            purge q                      -> ok
            counts q                     -> visible=0 inflight=0 delayed=0
            purge q                      -> error PurgeQueueInProgress("q")
            advance 60                   -> t+60s
            purge q                      -> ok
        "#]],
    );
}

#[test]
fn a_deleted_queue_name_is_reserved_for_sixty_seconds() {
    check(
        "
        create q
        drop q
        send q a
        create q
        advance 59
        create q
        advance 1
        create q
        drop nothere
        ",
        expect![[r#"
            create q                     -> ok
            drop q                       -> ok
            send q a                     -> error QueueDoesNotExist
            create q                     -> error QueueDeletedRecently
            advance 59                   -> t+59s
            create q                     -> error QueueDeletedRecently
            advance 1                    -> t+60s
            create q                     -> ok
            drop nothere                 -> error QueueDoesNotExist
        "#]],
    );
}

#[test]
fn receive_parameters_are_range_checked() {
    check(
        "
        create q
        recv q max=0
        recv q max=11
        recv q vis=43201
        recv nothere
        ",
        expect![[r#"
            create q                     -> ok
            recv q max=0                 -> error InvalidParameterValue("Value 0 for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided.")
            recv q max=11                -> error InvalidParameterValue("Value 11 for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided.")
            recv q vis=43201             -> error InvalidParameterValue("Value 43201 for parameter VisibilityTimeout is invalid. Reason: Must be >= 0 and <= 43200, if provided.")
            recv nothere                 -> error QueueDoesNotExist
        "#]],
    );
}
