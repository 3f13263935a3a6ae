//! Faults under load on two real `leasehold serve --postgres` processes sharing the machine's
//! PostgreSQL (a schema of the test's own): PostgreSQL restarted (`pg_ctlcluster restart`),
//! and one server killed with SIGKILL. A checker keeps every acknowledged send, receive and
//! delete: no acknowledged message is lost (a message whose delete failed may be gone: a
//! commit nobody lived to confirm may have happened), no acknowledged delete comes back, no
//! message is handed out twice while a lease on it is live, and while the database is away
//! requests are refused with a 5xx, never answered with a false success. The two tests take
//! turns (the restart would disturb the other), about 30 s each.

mod common;

use common::checker::{under_load, Ledger, ONE_AT_A_TIME};
use common::restart_postgres;

/// `under_load` on a schema of the test's own in the machine's PostgreSQL.
async fn in_a_schema(
    fault: impl FnOnce(common::Server) -> Option<common::Server> + Send + 'static,
) -> Ledger {
    let (_admin, schema, url) = common::postgres_schema("leasehold_faults").await;
    let ledger = under_load(&url, fault).await;
    // A connection of its own: the restart closed the first one.
    let admin = common::postgres_admin().await;
    admin
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
    ledger
}

/// Restarts the machine's PostgreSQL cluster (the one `.ci/run` starts).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_restarted_under_load_refuses_with_5xx_and_loses_nothing_acknowledged() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let ledger = in_a_schema(|a| {
        restart_postgres();
        Some(a)
    })
    .await;
    ledger.assert_refused_only_with("5xx");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_server_killed_under_load_loses_nothing_acknowledged() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let ledger = in_a_schema(|a| {
        a.kill();
        None
    })
    .await;
    // The killed server's clients get no answer; nobody gets a wrong one.
    ledger.assert_refused_only_with("no answer");
}
