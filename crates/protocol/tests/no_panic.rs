//! Any JSON document sent to any action gets an answer or a 4xx SQS error: never a panic,
//! never a server fault.

use std::sync::Arc;

use leasehold_engine::{Engine, EngineConfig, ManualClock, NewMessage};
use leasehold_protocol::{execute, wire_code, Context, Request};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

const ACTIONS: &[&str] = &[
    "CreateQueue",
    "DeleteQueue",
    "GetQueueUrl",
    "ListQueues",
    "GetQueueAttributes",
    "SetQueueAttributes",
    "PurgeQueue",
    "SendMessage",
    "SendMessageBatch",
    "ReceiveMessage",
    "DeleteMessage",
    "DeleteMessageBatch",
    "ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch",
    "TagQueue",
    "UntagQueue",
    "ListQueueTags",
    "Bogus",
];

/// Member names the actions really read, so random documents reach real code paths.
const MEMBERS: &[&str] = &[
    "QueueUrl",
    "QueueName",
    "Attributes",
    "tags",
    "Tags",
    "TagKeys",
    "MessageBody",
    "DelaySeconds",
    "MessageAttributes",
    "MessageSystemAttributes",
    "Entries",
    "Id",
    "ReceiptHandle",
    "VisibilityTimeout",
    "MaxNumberOfMessages",
    "WaitTimeSeconds",
    "AttributeNames",
    "MessageAttributeNames",
    "MessageSystemAttributeNames",
    "MaxResults",
    "NextToken",
    "QueueNamePrefix",
    "DataType",
    "StringValue",
    "BinaryValue",
    "VisibilityTimeout",
    "MessageRetentionPeriod",
    "MaximumMessageSize",
    "All",
];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-2i64..50_000).prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        "\\PC{0,12}".prop_map(Value::from),
        Just(json!("http://localhost/000000000000/q")),
        Just(json!("q")),
        Just(json!("String")),
        Just(json!("Binary")),
        Just(json!("AAAA")),
    ]
}

fn document() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..12).prop_map(Value::Array),
            proptest::collection::vec((proptest::sample::select(MEMBERS), inner), 0..6).prop_map(
                |pairs| {
                    Value::Object(
                        pairs
                            .into_iter()
                            .map(|(k, v)| (k.to_string(), v))
                            .collect::<Map<_, _>>(),
                    )
                }
            ),
        ]
    })
}

fn engine() -> Engine {
    let mut engine = Engine::new(
        Arc::new(ManualClock::new(1_000_000)),
        EngineConfig::default(),
    );
    engine.create_queue("q", &[], &[]).unwrap();
    engine.send("q", NewMessage::new("hello")).unwrap();
    engine
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_document_to_any_action_is_answered_or_refused_with_a_client_error(
        action in proptest::sample::select(ACTIONS),
        doc in document(),
    ) {
        let mut engine = engine();
        let ctx = Context {
            host: "localhost".into(),
            region: None,
        };
        let result = Request::from_value(action, doc.clone())
            .and_then(|request| execute(&mut engine, &ctx, &request));
        if let Err(error) = result {
            let status = wire_code(&error).status;
            prop_assert!((400..500).contains(&status), "{action} {doc} gave {status}: {error}");
            prop_assert!(!error.to_string().is_empty());
        }
    }

    #[test]
    fn any_bytes_as_a_json_body_never_panic(action in proptest::sample::select(ACTIONS), body in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = Request::from_json(action, &body);
    }
}
