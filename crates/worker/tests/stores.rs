//! The idempotency stores against one contract: in memory, and on the real PostgreSQL and
//! Redis of the machine (127.0.0.1:5432 database `test`, 127.0.0.1:6379). Tests that need a
//! service have it in their name, so `--skip postgres --skip redis` runs the rest without.

use std::sync::Arc;
use std::time::Duration;

use leasehold_worker::idempotency::{connect, MemoryStore};
use leasehold_worker::{Begin, IdempotencyStore};

pub const POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
pub const REDIS_URL: &str = "redis://127.0.0.1:6379";

fn key(name: &str) -> String {
    format!("test-{name}-{:016x}", rand::random::<u64>())
}

async fn the_contract(store: Arc<dyn IdempotencyStore>) {
    let k = key("contract");
    let ttl = Duration::from_secs(30);
    let Begin::Started(claim) = store.begin(&k, ttl).await.unwrap() else {
        panic!("a new key is ours")
    };
    assert_eq!(
        store.begin(&k, ttl).await.unwrap(),
        Begin::InProgressElsewhere
    );
    assert!(!store.is_completed(&k).await.unwrap());
    assert!(store.extend(&k, &claim, ttl).await.unwrap());
    let stranger = leasehold_worker::Claim::new();
    assert!(
        !store.extend(&k, &stranger, ttl).await.unwrap(),
        "a stranger cannot renew our claim"
    );
    store.release(&k, &stranger).await.unwrap();
    assert_eq!(
        store.begin(&k, ttl).await.unwrap(),
        Begin::InProgressElsewhere,
        "a stranger cannot release it"
    );
    assert!(store
        .complete(&k, &claim, Duration::from_secs(60))
        .await
        .unwrap());
    assert_eq!(store.begin(&k, ttl).await.unwrap(), Begin::Completed);
    assert!(store.is_completed(&k).await.unwrap());
    assert!(
        !store.extend(&k, &claim, ttl).await.unwrap(),
        "completed work is no longer a claim"
    );

    // A released claim can be taken again.
    let k2 = key("release");
    let Begin::Started(c2) = store.begin(&k2, ttl).await.unwrap() else {
        panic!()
    };
    store.release(&k2, &c2).await.unwrap();
    assert!(matches!(
        store.begin(&k2, ttl).await.unwrap(),
        Begin::Started(_)
    ));
}

async fn expired_claims_are_taken_over_by_compare_and_set(store: Arc<dyn IdempotencyStore>) {
    let k = key("expiry");
    let Begin::Started(old) = store.begin(&k, Duration::from_millis(300)).await.unwrap() else {
        panic!()
    };
    tokio::time::sleep(Duration::from_millis(600)).await;
    let Begin::Started(new) = store.begin(&k, Duration::from_secs(30)).await.unwrap() else {
        panic!("an abandoned claim is reclaimed")
    };
    assert_ne!(old, new);
    assert!(
        !store
            .complete(&k, &old, Duration::from_secs(60))
            .await
            .unwrap(),
        "the crashed worker's claim is gone"
    );
    assert!(!store
        .extend(&k, &old, Duration::from_secs(30))
        .await
        .unwrap());
    assert!(store
        .complete(&k, &new, Duration::from_secs(60))
        .await
        .unwrap());
}

/// A completion whose answer was lost is retried: the retry succeeds. A claim that lapsed
/// while nobody took it over can still be completed by its holder, whose work is done.
async fn completing_is_idempotent_and_survives_a_lapsed_claim(store: Arc<dyn IdempotencyStore>) {
    let k = key("complete-twice");
    let Begin::Started(claim) = store.begin(&k, Duration::from_secs(30)).await.unwrap() else {
        panic!()
    };
    let retention = Duration::from_secs(60);
    assert!(store.complete(&k, &claim, retention).await.unwrap());
    assert!(store.complete(&k, &claim, retention).await.unwrap());
    let stranger = leasehold_worker::Claim::new();
    assert!(!store.complete(&k, &stranger, retention).await.unwrap());

    let k = key("lapsed");
    let Begin::Started(claim) = store.begin(&k, Duration::from_millis(200)).await.unwrap() else {
        panic!()
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(store.complete(&k, &claim, retention).await.unwrap());
    assert_eq!(
        store.begin(&k, Duration::from_secs(30)).await.unwrap(),
        Begin::Completed
    );
}

async fn exactly_one_of_many_racing_workers_gets_the_claim(store: Arc<dyn IdempotencyStore>) {
    let k = key("race");
    let attempts: Vec<_> = (0..20)
        .map(|_| {
            let (store, k) = (store.clone(), k.clone());
            tokio::spawn(async move { store.begin(&k, Duration::from_secs(30)).await.unwrap() })
        })
        .collect();
    let mut started = 0;
    for a in attempts {
        if matches!(a.await.unwrap(), Begin::Started(_)) {
            started += 1;
        }
    }
    assert_eq!(started, 1);
}

async fn all(url: &str) {
    let store: Arc<dyn IdempotencyStore> =
        Arc::from(connect(url).await.unwrap_or_else(|e| panic!("{url}: {e}")));
    the_contract(store.clone()).await;
    expired_claims_are_taken_over_by_compare_and_set(store.clone()).await;
    completing_is_idempotent_and_survives_a_lapsed_claim(store.clone()).await;
    exactly_one_of_many_racing_workers_gets_the_claim(store).await;
}

#[tokio::test]
async fn memory_store_keeps_the_contract() {
    let store: Arc<dyn IdempotencyStore> = Arc::new(MemoryStore::default());
    the_contract(store.clone()).await;
    expired_claims_are_taken_over_by_compare_and_set(store.clone()).await;
    completing_is_idempotent_and_survives_a_lapsed_claim(store.clone()).await;
    exactly_one_of_many_racing_workers_gets_the_claim(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_keeps_the_contract() {
    all(POSTGRES_URL).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_keeps_the_contract() {
    all(REDIS_URL).await;
}

#[tokio::test]
async fn an_unknown_store_url_is_refused() {
    assert!(connect("mysql://nope").await.is_err());
}
