//! A Leasehold server for a test in one line: the real server (the same router, engine and
//! rules as `leasehold serve --in-memory`), in process, on a free loopback port, with a
//! clock the test moves.
//!
//! ```no_run
//! # async fn example() {
//! use std::time::Duration;
//! let server = leasehold_testing::TestServer::start().await;
//! let sqs = server.sqs();
//! let url = sqs.create_queue().queue_name("orders").send().await.unwrap().queue_url.unwrap();
//! sqs.send_message().queue_url(&url).message_body("order 1").send().await.unwrap();
//! sqs.receive_message().queue_url(&url).visibility_timeout(30).send().await.unwrap();
//! server.advance(Duration::from_secs(31)).await; // the lease has run out, at once
//! # }
//! ```
//!
//! The server runs on the test's tokio runtime (start one per test: a server shared between
//! tests dies with the runtime of the first) and stops when the `TestServer` is dropped
//! (or, waiting until it has, with `stop`). In `Cargo.toml`, as a dev-dependency by path or
//! git: `leasehold-testing = { path = "../leasehold/crates/testing" }`.

#![cfg_attr(not(test), warn(clippy::unwrap_used))]

use std::sync::Arc;
use std::time::Duration;

use aws_credential_types::Credentials;
use aws_sdk_sqs::config::{BehaviorVersion, Region};
use leasehold_embedded::{Embedded, EngineSetup};
use leasehold_server::{AppState, ServerConfig, WallClock};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The region and account of the test server's queues (`ServerConfig`'s defaults).
pub const REGION: &str = "us-east-1";

/// A running server; stopped when dropped.
pub struct TestServer {
    endpoint_url: String,
    state: Arc<AppState>,
    stop: Option<oneshot::Sender<()>>,
    served: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    /// Starts a server in memory on `127.0.0.1` and a free port, in the default (AWS) lease
    /// mode, with time travel on.
    pub async fn start() -> TestServer {
        TestServer::start_with(ServerConfig {
            time_travel: true,
            ..ServerConfig::default()
        })
        .await
    }

    /// Starts a server of this configuration in memory on `127.0.0.1` and a free port.
    ///
    /// # Panics
    /// When no loopback port can be bound: a test cannot go on without its server.
    pub async fn start_with(config: ServerConfig) -> TestServer {
        let clock = Arc::new(WallClock::default());
        let naming = leasehold_engine::Naming {
            region: config.region.clone(),
            account_id: config.account_id.clone(),
        };
        let mut setup = EngineSetup::serving(clock.clone(), config.lease_mode, naming);
        setup.config.max_queues_per_account = config.max_queues_per_account;
        setup.config.max_in_flight_per_queue = config.max_in_flight_per_queue;
        let backend = Embedded::in_memory(setup);
        let state = AppState::new(config, clock, Arc::new(backend));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free loopback port for the test server");
        let address = listener.local_addr().expect("the bound address");
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(leasehold_server::serve(listener, state.clone(), async {
            let _ = stopped.await;
        }));
        TestServer {
            endpoint_url: format!("http://{address}"),
            state,
            stop: Some(stop),
            served: Some(served),
        }
    }

    /// `http://127.0.0.1:PORT`: the endpoint for any SDK (`endpoint_url`) or the aws CLI.
    pub fn endpoint_url(&self) -> &str {
        &self.endpoint_url
    }

    /// An `aws-sdk-sqs` client of this server, in its region (`us-east-1` unless its
    /// configuration says otherwise), with a test key: the server checks no signature
    /// unless its configuration asks it to.
    pub fn sqs(&self) -> aws_sdk_sqs::Client {
        let config = aws_sdk_sqs::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(self.state.config.region.clone()))
            .endpoint_url(&self.endpoint_url)
            .credentials_provider(Credentials::new(
                "test",
                "test",
                None,
                None,
                "leasehold-testing",
            ))
            .build();
        aws_sdk_sqs::Client::from_conf(config)
    }

    /// Moves the server's clock forward by `by`, rounded to the millisecond (leases,
    /// delays, retention and redrive follow), and wakes the receives waiting in long polls
    /// to look again, as `POST /_leasehold/clock/advance` does; the clock keeps running from
    /// there.
    ///
    /// # Panics
    /// Past a century of travel in all.
    pub async fn advance(&self, by: Duration) {
        let ms = u64::try_from((by.as_micros() + 500) / 1000).unwrap_or(u64::MAX);
        (self.state.clock.advance_ms(ms)).expect("time travel of at most a century in all");
        // In memory, the backend's own record of the jump cannot fail.
        let _ = self.state.backend.clock_advanced(ms).await;
        self.state.backend.wake_all();
    }

    /// Stops serving and waits until the server has let go of everything.
    pub async fn stop(mut self) {
        let _ = self.stop.take().map(|stop| stop.send(()));
        if let Some(served) = self.served.take() {
            let _ = served.await;
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        // Dropped without `stop`: told to stop. Its listener closes at once; its task ends
        // once open connections have had their moment to finish, ending its background
        // work with it (an aborted task would leave that running).
        let _ = self.stop.take().map(|stop| stop.send(()));
    }
}
