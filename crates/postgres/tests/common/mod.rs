//! What the PostgreSQL tests share: the machine's database, and a schema per test.

#![allow(dead_code)] // each test binary uses its own part

use leasehold_engine::{LeaseMode, Naming};
use leasehold_postgres::{Options, Postgres};

pub const URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// A schema of a test's own (`leasehold_test_*`), dropped by `drop_all` when the test passed
/// and left for a look when it failed.
pub struct Schema(pub String);

impl Schema {
    pub async fn new() -> Schema {
        let name = format!("leasehold_test_{}", rand::random::<u32>());
        admin(&format!("CREATE SCHEMA {name}")).await;
        Schema(name)
    }

    pub async fn server(&self) -> Postgres {
        self.server_in(LeaseMode::Aws).await
    }

    pub async fn server_in(&self, lease_mode: LeaseMode) -> Postgres {
        let options = Options {
            schema: Some(self.0.clone()),
            lease_mode,
            encryption_key_file: Some(key_file()),
            ..Options::default()
        };
        Postgres::connect(URL, naming(), options).await.unwrap()
    }

    /// Closes the servers' connections and drops the schema.
    pub async fn drop_all(self, servers: impl IntoIterator<Item = Postgres>) {
        servers.into_iter().for_each(drop);
        admin(&format!(
            "SET lock_timeout = '10s'; DROP SCHEMA {} CASCADE",
            self.0
        ))
        .await;
    }
}

/// The key file of the tests' servers: one fixed test key (each schema records it on its
/// first start), so they run on encrypted queues, as the default is. Written whole under a
/// name of its own, then renamed into place: a test binary beside this one never reads it
/// half written.
pub fn key_file() -> std::path::PathBuf {
    static FILE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir();
        let path = dir.join("leasehold-postgres-tests.key");
        let partial = dir.join(format!(
            "leasehold-postgres-tests.key.{}",
            std::process::id()
        ));
        std::fs::write(&partial, format!("1 {}\n", "3c".repeat(32))).unwrap();
        std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::rename(&partial, &path).unwrap();
        path
    })
    .clone()
}

pub async fn admin(sql: &str) {
    let (client, connection) = tokio_postgres::connect(URL, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client.batch_execute(sql).await.unwrap();
}

pub fn naming() -> Naming {
    Naming {
        region: "us-east-1".into(),
        account_id: "000000000000".into(),
    }
}

/// Starts a move task from queue `dlq` back to where its messages came from, and receives one
/// message from `source` (with `source`'s lease) until the task has put one there, for up to
/// five seconds: what came back.
pub async fn redriven(server: &Postgres, source: &str) -> Vec<leasehold_engine::Delivery> {
    use leasehold_backend::{Messages, MoveTaskStart, QueueAdmin};
    let task = MoveTaskStart {
        source_arn: "arn:aws:sqs:us-east-1:000000000000:dlq".into(),
        destination_arn: None,
        per_second: None,
    };
    server.start_move_task(task).await.unwrap();
    let request = leasehold_engine::ReceiveRequest {
        max_messages: 1,
        visibility_s: None,
        attempt_id: None,
    };
    let mut back = Vec::new();
    for _ in 0..50 {
        back = server
            .receive(source, request.clone())
            .await
            .unwrap()
            .deliveries;
        if !back.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    back
}
