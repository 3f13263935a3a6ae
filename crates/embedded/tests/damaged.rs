//! The embedded backend on a damaged store: a message record whose body is gone (issue 46,
//! defect 7).

use std::sync::Arc;

use leasehold_backend::{Messages, QueueAdmin};
use leasehold_embedded::{Embedded, EngineSetup, StoreOptions};
use leasehold_engine::{EngineConfig, ManualClock, NewMessage, ReceiveRequest};
use leasehold_store::{Durability, MemoryStore};

fn one() -> ReceiveRequest {
    ReceiveRequest {
        max_messages: 1,
        visibility_s: Some(30),
        attempt_id: None,
    }
}

/// A message whose body the store lost was leased by every receive, counted, and left out of
/// the answer, without a word; in a FIFO queue it held its group until retention ended. Now
/// the first receive that finds it drops it, and the group goes on.
#[tokio::test]
async fn a_message_whose_body_is_lost_is_dropped_and_its_group_goes_on() {
    let clock = ManualClock::new(1_000_000);
    let store = MemoryStore::default();
    let setup = EngineSetup {
        clock: Arc::new(clock.clone()),
        config: EngineConfig::default(),
    };
    let options = StoreOptions {
        body_cache_bytes: 0,
        ..StoreOptions::from(Durability::Always)
    };
    let backend = Embedded::durable(setup, Box::new(store.clone()), options).unwrap();
    let fifo = vec![
        ("FifoQueue".to_string(), "true".to_string()),
        ("ContentBasedDeduplication".to_string(), "true".to_string()),
    ];
    backend.create_queue("q.fifo", fifo, vec![]).await.unwrap();
    for body in ["first", "second"] {
        let message = NewMessage {
            group_id: Some("g".into()),
            ..NewMessage::new(body)
        };
        backend.send("q.fifo", message).await.unwrap();
    }
    store.lose_contents(1);

    let got = backend.receive("q.fifo", one()).await.unwrap();
    assert!(got.deliveries.is_empty(), "a message without its body");
    let got = backend.receive("q.fifo", one()).await.unwrap();
    let bodies: Vec<&str> = got.deliveries.iter().map(|d| &*d.body).collect();
    assert_eq!(
        bodies,
        ["second"],
        "the group waited behind the lost message"
    );
    let counts = backend
        .get_attributes(
            "q.fifo",
            vec![
                "ApproximateNumberOfMessages".into(),
                "ApproximateNumberOfMessagesNotVisible".into(),
            ],
        )
        .await
        .unwrap();
    assert_eq!(counts[0].1, "0");
    assert_eq!(counts[1].1, "1", "only the second is in flight");
}

/// A store that holds encrypted contents, opened without its key file, could only drop them
/// as damaged: it is refused, in one line; with the key file it opens and they read.
#[tokio::test]
async fn a_store_with_encrypted_contents_is_refused_without_its_key_file() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("encryption.key");
    let store = MemoryStore::default();
    let setup = || EngineSetup {
        clock: Arc::new(ManualClock::new(1_000_000)),
        config: EngineConfig::default(),
    };
    let options = |key_file: Option<std::path::PathBuf>| StoreOptions {
        encryption_key_file: key_file,
        ..StoreOptions::from(Durability::Always)
    };
    let backend = Embedded::durable(
        setup(),
        Box::new(store.clone()),
        options(Some(key_file.clone())),
    )
    .unwrap();
    backend.create_queue("q", vec![], vec![]).await.unwrap();
    backend.send("q", NewMessage::new("secret")).await.unwrap();
    drop(backend);
    let held = store.records();
    assert!(!held.values().any(|v| v.windows(6).any(|w| w == b"secret")));

    let refused = Embedded::durable(setup(), Box::new(store.clone()), options(None));
    let error = refused.err().expect("opened without its keys").to_string();
    assert!(error.contains("no encryption key file"), "{error}");
    assert_eq!(error.lines().count(), 1);

    let backend = Embedded::durable(setup(), Box::new(store), options(Some(key_file))).unwrap();
    let got = backend.receive("q", one()).await.unwrap();
    assert_eq!(got.deliveries.len(), 1);
    assert_eq!(&*got.deliveries[0].body, "secret");
}
