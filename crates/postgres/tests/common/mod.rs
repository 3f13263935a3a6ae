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
