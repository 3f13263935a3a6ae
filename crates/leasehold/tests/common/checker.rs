//! A checker of two real `leasehold serve --postgres` processes under load through a fault:
//! it keeps every acknowledged send, receive and delete, and asserts that no acknowledged
//! message is lost (a message whose delete failed may be gone: a commit nobody lived to
//! confirm may have happened), no acknowledged delete comes back, no message is handed out
//! twice while a lease on it is live, and, for the caller, how each refused request was
//! refused and when (a 5xx, never a false success).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_sqs::error::SdkError;
use aws_sdk_sqs::Client;

use super::Server;

/// The lease every receive takes: longer than the load runs, so any second delivery during
/// the load would be one under a live lease.
pub const LEASE_S: i32 = 10;
pub const LOAD: Duration = Duration::from_secs(8);
pub const FAULT_AFTER: Duration = Duration::from_secs(2);

pub static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Everything the clients were told, and what broke the rules.
#[derive(Default)]
pub struct Ledger {
    pub sent: HashSet<String>,
    pub deleted: HashSet<String>,
    /// Deletes that failed: one whose commit the database or the server did not live to
    /// confirm may still have taken effect, so its message is not counted lost.
    pub delete_failed: HashSet<String>,
    pub delivered_at: HashMap<String, Instant>,
    pub violations: Vec<String>,
    /// Refusals by kind: "5xx", "4xx CODE", "no answer" (a server that is gone).
    pub refusals: BTreeMap<String, u64>,
    pub answered: u64,
    /// When the first and the last refusal came: the span without service.
    pub refusing: Option<(Instant, Instant)>,
}

impl Ledger {
    fn refused<E>(&mut self, error: &SdkError<E, aws_sdk_sqs::config::http::HttpResponse>)
    where
        E: aws_sdk_sqs::error::ProvideErrorMetadata,
    {
        let kind = match error {
            SdkError::ServiceError(service) => {
                let status = service.raw().status().as_u16();
                if status >= 500 {
                    "5xx".to_string()
                } else {
                    format!("{status} {}", service.err().code().unwrap_or("?"))
                }
            }
            _ => "no answer".to_string(),
        };
        *self.refusals.entry(kind).or_default() += 1;
        let now = Instant::now();
        let first = self.refusing.map_or(now, |(first, _)| first);
        self.refusing = Some((first, now));
    }

    /// Asserts every refusal was of `kind` ("5xx", "no answer"), and that some were.
    pub fn assert_refused_only_with(&self, kind: &str) {
        let unexpected: Vec<_> = self.refusals.keys().filter(|k| *k != kind).collect();
        assert!(unexpected.is_empty(), "{:?}", self.refusals);
        assert!(
            self.refusals.get(kind).is_some_and(|n| *n > 0),
            "no request met the fault: {:?}",
            self.refusals
        );
    }

    /// A delivery: it must not be of a message whose delete was acknowledged, nor come while
    /// an earlier delivery's lease is live.
    fn delivered(&mut self, body: &str, at: Instant) {
        if self.deleted.contains(body) {
            self.violations.push(format!(
                "{body} came back after its delete was acknowledged"
            ));
        }
        if let Some(before) = self.delivered_at.insert(body.to_string(), at) {
            let lease = Duration::from_secs(LEASE_S as u64) - Duration::from_millis(500);
            if at.duration_since(before) < lease {
                self.violations
                    .push(format!("{body} was handed out twice under one live lease"));
            }
        }
    }
}

async fn sender(
    sqs: Client,
    url: String,
    name: String,
    ledger: Arc<Mutex<Ledger>>,
    until: Instant,
) {
    let mut n = 0;
    while Instant::now() < until {
        let body = format!("{name}-{n}");
        n += 1;
        let sent = sqs
            .send_message()
            .queue_url(&url)
            .message_body(&body)
            .send()
            .await;
        {
            let mut ledger = ledger.lock().unwrap();
            match sent {
                Ok(_) => {
                    ledger.sent.insert(body);
                    ledger.answered += 1;
                }
                Err(error) => ledger.refused(&error),
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn receiver(sqs: Client, url: String, ledger: Arc<Mutex<Ledger>>, until: Instant) {
    while Instant::now() < until {
        let received = sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .visibility_timeout(LEASE_S)
            .wait_time_seconds(1)
            .send()
            .await;
        let messages = match received {
            Ok(out) => out.messages.unwrap_or_default(),
            Err(error) => {
                ledger.lock().unwrap().refused(&error);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let at = Instant::now();
        for message in messages {
            let body = message.body.unwrap_or_default();
            ledger.lock().unwrap().delivered(&body, at);
            let deleted = sqs
                .delete_message()
                .queue_url(&url)
                .receipt_handle(message.receipt_handle.unwrap_or_default())
                .send()
                .await;
            let mut ledger = ledger.lock().unwrap();
            match deleted {
                Ok(_) => {
                    ledger.deleted.insert(body);
                    ledger.answered += 1;
                }
                Err(error) => {
                    ledger.refused(&error);
                    ledger.delete_failed.insert(body);
                }
            }
        }
    }
}

/// Load on two servers on `url` for `LOAD`, with `fault` done `FAULT_AFTER` into it (given
/// server A, it answers what is left of it); then, once every lease has run out, the queue
/// drained through B; then the checks.
pub async fn under_load(
    url: &str,
    fault: impl FnOnce(Server) -> Option<Server> + Send + 'static,
) -> Ledger {
    let (a, b) = (Server::start_postgres(url), Server::start_postgres(url));
    let (on_a, on_b) = (a.client(), b.client());
    let queue = super::create_queue(&on_b, "faults").await;
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let until = Instant::now() + LOAD;
    let mut load = tokio::task::JoinSet::new();
    for (i, sqs) in [&on_a, &on_b, &on_a, &on_b].into_iter().enumerate() {
        load.spawn(sender(
            sqs.clone(),
            queue.clone(),
            format!("s{i}"),
            ledger.clone(),
            until,
        ));
        load.spawn(receiver(sqs.clone(), queue.clone(), ledger.clone(), until));
    }
    tokio::time::sleep(FAULT_AFTER).await;
    let a = tokio::task::spawn_blocking(move || fault(a)).await.unwrap();
    load.join_all().await;

    // Every lease taken during the load runs out; then whatever is left is received on B.
    tokio::time::sleep(Duration::from_secs(LEASE_S as u64 + 1)).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut empty = 0;
    while empty < 3 {
        assert!(
            Instant::now() < deadline,
            "the queue did not drain within 60 s"
        );
        let drained = on_b
            .receive_message()
            .queue_url(&queue)
            .max_number_of_messages(10)
            .visibility_timeout(60)
            .send()
            .await;
        let Ok(out) = drained else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let messages = out.messages.unwrap_or_default();
        empty = if messages.is_empty() { empty + 1 } else { 0 };
        let mut ledger = ledger.lock().unwrap();
        for message in messages {
            let body = message.body.unwrap_or_default();
            ledger.delivered(&body, Instant::now());
            // Received at the end: kept, not lost.
            ledger.deleted.insert(body);
        }
    }
    drop((a, b));
    let ledger = Arc::into_inner(ledger).unwrap().into_inner().unwrap();
    eprintln!(
        "{} answered, {} sends acknowledged, refused: {:?}",
        ledger.answered,
        ledger.sent.len(),
        ledger.refusals
    );
    let lost: Vec<&String> = ledger
        .sent
        .iter()
        .filter(|body| !ledger.deleted.contains(*body) && !ledger.delete_failed.contains(*body))
        .collect();
    assert!(lost.is_empty(), "acknowledged sends lost: {lost:?}");
    assert!(ledger.violations.is_empty(), "{:?}", ledger.violations);
    assert!(
        ledger.answered > 100,
        "too little load to mean anything: {}",
        ledger.answered
    );
    ledger
}
