//! Any JSON document sent to any action gets an answer or a 4xx SQS error: never a panic,
//! never a server fault.

use leasehold_backend::{Messages, QueueAdmin};
use std::sync::Arc;

use leasehold_embedded::{Embedded, EngineSetup};
use leasehold_engine::{EngineConfig, ManualClock, NewMessage};
use leasehold_protocol::{wire_code, Context, ProtocolError, Request, Step};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

/// Every action from the one list (`actions!`), and one that does not exist.
fn actions() -> Vec<&'static str> {
    leasehold_protocol::ACTIONS
        .iter()
        .copied()
        .chain(["Bogus"])
        .collect()
}

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

async fn backend() -> Embedded {
    let backend = Embedded::in_memory(EngineSetup {
        clock: Arc::new(ManualClock::new(1_000_000)),
        config: EngineConfig::default(),
    });
    backend.create_queue("q", vec![], vec![]).await.unwrap();
    backend.send("q", NewMessage::new("hello")).await.unwrap();
    backend
}

/// Applies the request as a server would, a receive attempted once.
async fn apply(action: &str, doc: Value) -> Result<(), ProtocolError> {
    let backend = backend().await;
    let ctx = Context {
        host: "localhost".into(),
        origin: "http://localhost".into(),
        region: None,
        account: None,
    };
    let request = Request::from_value(action, doc)?;
    if let Step::Receive(receive) = request.apply(&backend, &ctx).await? {
        receive.attempt(&backend).await?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_document_to_any_action_is_answered_or_refused_with_a_client_error(
        action in proptest::sample::select(actions()),
        doc in document(),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        if let Err(error) = runtime.block_on(apply(action, doc.clone())) {
            let status = wire_code(&error).status;
            prop_assert!((400..500).contains(&status), "{action} {doc} gave {status}: {error}");
            prop_assert!(!error.to_string().is_empty());
        }
    }

    #[test]
    fn any_bytes_as_a_json_body_never_panic(action in proptest::sample::select(actions()), body in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = Request::from_json(action, &body);
    }
}
