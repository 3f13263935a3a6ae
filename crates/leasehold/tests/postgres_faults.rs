//! Faults under load on two real `leasehold serve --postgres` processes sharing the machine's
//! PostgreSQL (a schema of the test's own): PostgreSQL restarted (`pg_ctlcluster restart`),
//! and one server killed with SIGKILL. A checker keeps every acknowledged send, receive and
//! delete: no acknowledged message is lost (a message whose delete failed may be gone: a
//! commit nobody lived to confirm may have happened), no acknowledged delete comes back, no
//! message is handed out twice while a lease on it is live, and while the database is away
//! requests are refused with a 5xx, never answered with a false success. The two tests take
//! turns (the restart would disturb the other), about 30 s each.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_sqs::error::SdkError;
use aws_sdk_sqs::Client;
use common::{restart_postgres, Server};

/// The lease every receive takes: longer than the load runs, so any second delivery during
/// the load would be one under a live lease.
const LEASE_S: i32 = 10;
const LOAD: Duration = Duration::from_secs(8);
const FAULT_AFTER: Duration = Duration::from_secs(2);

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Everything the clients were told, and what broke the rules.
#[derive(Default)]
struct Ledger {
    sent: HashSet<String>,
    deleted: HashSet<String>,
    /// Deletes that failed: one whose commit the database or the server did not live to
    /// confirm may still have taken effect, so its message is not counted lost.
    delete_failed: HashSet<String>,
    delivered_at: HashMap<String, Instant>,
    violations: Vec<String>,
    /// Refusals by kind: "5xx", "4xx CODE", "no answer" (a server that is gone).
    refusals: BTreeMap<String, u64>,
    answered: u64,
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

/// Load on both servers for `LOAD`, with `fault` done `FAULT_AFTER` into it; then, once
/// every lease has run out, the queue drained through `survivor`; then the checks.
async fn under_load(fault: impl FnOnce(Server) -> Option<Server> + Send + 'static) -> Ledger {
    let (admin, schema, url) = common::postgres_schema("leasehold_faults").await;
    let (a, b) = (Server::start_postgres(&url), Server::start_postgres(&url));
    let (on_a, on_b) = (a.client(), b.client());
    let queue = common::create_queue(&on_b, "faults").await;
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
    drop((a, b, admin));
    // A connection of its own: the restart closed the first one.
    let admin = common::postgres_admin().await;
    admin
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
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

/// Restarts the machine's PostgreSQL cluster (the one `.ci/run` starts).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_restarted_under_load_refuses_with_5xx_and_loses_nothing_acknowledged() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let ledger = under_load(|a| {
        restart_postgres();
        Some(a)
    })
    .await;
    let unexpected: Vec<_> = ledger
        .refusals
        .keys()
        .filter(|kind| *kind != "5xx")
        .collect();
    assert!(unexpected.is_empty(), "{:?}", ledger.refusals);
    assert!(
        ledger.refusals.get("5xx").is_some_and(|n| *n > 0),
        "no request met the restart: {:?}",
        ledger.refusals
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_server_killed_under_load_loses_nothing_acknowledged() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let ledger = under_load(|a| {
        a.kill();
        None
    })
    .await;
    // The killed server's clients get no answer; nobody gets a wrong one.
    let unexpected: Vec<_> = ledger
        .refusals
        .keys()
        .filter(|kind| *kind != "no answer")
        .collect();
    assert!(unexpected.is_empty(), "{:?}", ledger.refusals);
    assert!(ledger.refusals.get("no answer").is_some_and(|n| *n > 0));
}
