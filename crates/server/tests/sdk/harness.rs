//! Starts a server on an ephemeral loopback port and hands out SDK clients for it.

use std::sync::Arc;
use std::time::Duration;

use aws_credential_types::Credentials;
use aws_sdk_sqs::config::{BehaviorVersion, Region};
use aws_sdk_sqs::error::ProvideErrorMetadata;
use aws_sdk_sqs::Client;
use leasehold_embedded::{Embedded, EngineSetup, StoreOptions};
use leasehold_engine::LeaseMode;
use leasehold_server::{AppState, ServerConfig, WallClock};
use leasehold_store::{Store, StoreError};

/// The engine setup the binary gives a server of `config`.
fn setup(config: &ServerConfig, clock: &Arc<WallClock>) -> EngineSetup {
    let naming = leasehold_engine::Naming {
        region: config.region.clone(),
        account_id: config.account_id.clone(),
    };
    let mut setup = EngineSetup::serving(clock.clone(), config.lease_mode, naming);
    setup.config.max_queues_per_account = config.max_queues_per_account;
    setup.config.max_in_flight_per_queue = config.max_in_flight_per_queue;
    setup
}

/// A server that keeps everything in memory, as `leasehold serve --in-memory` builds it.
pub fn in_memory(config: ServerConfig) -> Arc<AppState> {
    let clock = Arc::new(WallClock::default());
    let backend = Embedded::in_memory(setup(&config, &clock));
    AppState::new(config, clock, Arc::new(backend))
}

/// A durable server on `store`, as `leasehold serve` builds it.
pub fn durable(
    config: ServerConfig,
    store: Box<dyn Store>,
    options: impl Into<StoreOptions>,
) -> Result<Arc<AppState>, StoreError> {
    let clock = Arc::new(WallClock::default());
    let backend = Embedded::durable(setup(&config, &clock), store, options)?;
    Ok(AppState::new(config, clock, Arc::new(backend)))
}

pub struct TestServer {
    pub sqs: Client,
    pub base: String,
    http: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    /// The PostgreSQL schema the server keeps its queues in, on that backend.
    schema: Option<String>,
}

const POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

async fn postgres_admin(sql: &str) {
    let (client, connection) = tokio_postgres::connect(POSTGRES_URL, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client.batch_execute(sql).await.unwrap();
}

/// Drops a test's schema. A statement of the stopped server's last tick (aborted in the
/// client, still running in the database a moment longer) can hold one of its tables while
/// the drop holds another: PostgreSQL then ends the drop as a deadlock, and it is tried again.
async fn drop_schema(schema: &str) {
    let (client, connection) = tokio_postgres::connect(POSTGRES_URL, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let sql = format!("SET lock_timeout = '10s'; DROP SCHEMA {schema} CASCADE");
    for attempt in 1.. {
        match client.batch_execute(&sql).await {
            Ok(()) => return,
            Err(e)
                if attempt < 10
                    && e.code()
                        == Some(&tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED) =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("cannot drop the test schema {schema}: {e}"),
        }
    }
}

/// A test that ends without `stop` leaves its schema to a thread of its own, which drops it
/// once the test's runtime has ended and let go of the server's connections (a drop cannot
/// wait on that runtime: it is the one running the drop). What a run's last tests leave when
/// the process exits first, the next run sweeps (`sweep_old_schemas`).
impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(schema) = self.schema.take() {
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime for the drop");
                runtime.block_on(drop_schema(&schema));
            });
        }
    }
}

/// The key file of every PostgreSQL-backed test server: one fixed test key (each schema
/// records it on its first start), so the suite runs on encrypted queues there as on the
/// embedded store. Written whole under a name of its own, then renamed into place, so a
/// test binary running beside this one never reads it half written.
fn postgres_key_file() -> std::path::PathBuf {
    static FILE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir();
        let path = dir.join("leasehold-sdk-tests.key");
        let partial = dir.join(format!("leasehold-sdk-tests.key.{}", std::process::id()));
        std::fs::write(&partial, format!("1 {}\n", "5a".repeat(32))).unwrap();
        std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::rename(&partial, &path).unwrap();
        path
    })
    .clone()
}

/// The schema a server of this run keeps its queues in: named for when it was made.
fn new_schema() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    format!("leasehold_sdk_{now}_{}", rand::random::<u32>())
}

/// Drops the schemas of runs that ended over ten minutes ago, once per run.
async fn sweep_old_schemas() {
    static SWEPT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if SWEPT.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    postgres_admin(
        "DO $$ DECLARE s text; BEGIN
           FOR s IN SELECT nspname FROM pg_namespace
                    WHERE nspname ~ '^leasehold_sdk_[0-9]+_[0-9]+$'
                      AND split_part(nspname, '_', 3)::bigint < extract(epoch FROM now()) - 600
           LOOP EXECUTE format('DROP SCHEMA %I CASCADE', s); END LOOP;
         END $$",
    )
    .await;
}

impl TestServer {
    /// A server in the default (AWS) lease mode with time travel on.
    pub async fn start() -> TestServer {
        Self::start_with(LeaseMode::Aws).await
    }

    pub async fn start_with(lease_mode: LeaseMode) -> TestServer {
        Self::start_config(ServerConfig {
            lease_mode,
            time_travel: true,
            ..ServerConfig::default()
        })
        .await
    }

    /// A server with this configuration on the embedded backend, or, when
    /// `LEASEHOLD_TEST_BACKEND=postgres` (scripts/test's second run of this suite), on the
    /// machine's PostgreSQL in a schema of its own.
    pub async fn start_config(config: ServerConfig) -> TestServer {
        if std::env::var("LEASEHOLD_TEST_BACKEND").as_deref() != Ok("postgres") {
            return Self::start_state(in_memory(config)).await;
        }
        sweep_old_schemas().await;
        let schema = new_schema();
        postgres_admin(&format!("CREATE SCHEMA {schema}")).await;
        let options = leasehold_postgres::Options {
            schema: Some(schema.clone()),
            lease_mode: config.lease_mode,
            max_queues_per_account: config.max_queues_per_account,
            encryption_key_file: Some(postgres_key_file()),
            ..leasehold_postgres::Options::default()
        };
        let naming = leasehold_engine::Naming {
            region: config.region.clone(),
            account_id: config.account_id.clone(),
        };
        let backend = leasehold_postgres::Postgres::connect(POSTGRES_URL, naming, options)
            .await
            .unwrap();
        let clock = Arc::new(WallClock::default());
        let state = AppState::new(config, clock, Arc::new(backend));
        let mut server = Self::start_state(state).await;
        server.schema = Some(schema);
        server
    }

    /// A server on a state built elsewhere (a durable one, a faulty one).
    pub async fn start_state(state: std::sync::Arc<AppState>) -> TestServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(leasehold_server::serve(listener, state, async {
            let _ = stopped.await;
        }));
        TestServer {
            sqs: sdk_client(&base, "test", "test", "us-east-1"),
            base,
            http: reqwest::Client::new(),
            stop: Some(stop),
            served: Some(served),
            schema: None,
        }
    }

    /// Stops serving and waits until the server has let go of its state (and store), then
    /// drops its PostgreSQL schema, if it has one.
    pub async fn stop(mut self) {
        let _ = self.stop.take().map(|s| s.send(()));
        if let Some(served) = self.served.take() {
            served.await.unwrap().unwrap();
        }
        if let Some(schema) = self.schema.take() {
            drop_schema(&schema).await;
        }
    }

    /// A client of this server signing with another key, in another region.
    pub fn client_as(&self, access_key: &str, secret: &str, region: &str) -> Client {
        sdk_client(&self.base, access_key, secret, region)
    }

    /// Creates a queue with the given attributes and returns its URL.
    pub async fn queue(&self, name: &str, attributes: &[(&str, &str)]) -> String {
        let mut request = self.sqs.create_queue().queue_name(name);
        for (k, v) in attributes {
            request = request.attributes((*k).into(), (*v).to_string());
        }
        request.send().await.unwrap().queue_url.unwrap()
    }

    /// Jumps the server's clock forward.
    pub async fn advance(&self, seconds: u64) {
        let response = self
            .http
            .post(format!("{}/_leasehold/clock/advance", self.base))
            .json(&serde_json::json!({ "seconds": seconds }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }

    /// A raw AWS JSON 1.0 call, for what SDKs will not send.
    pub async fn raw(
        &self,
        target: Option<&str>,
        body: &str,
    ) -> (u16, reqwest::header::HeaderMap, serde_json::Value) {
        let mut request = self
            .http
            .post(format!("{}/", self.base))
            .header("content-type", "application/x-amz-json-1.0")
            .body(body.to_string());
        if let Some(target) = target {
            request = request.header("x-amz-target", target);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let json = response.json().await.unwrap_or(serde_json::Value::Null);
        (status, headers, json)
    }

    pub async fn receive(&self, url: &str, max: i32) -> Vec<aws_sdk_sqs::types::Message> {
        self.sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(max)
            .send()
            .await
            .unwrap()
            .messages
            .unwrap_or_default()
    }

    /// Receives up to `max` messages and returns each one's ApproximateReceiveCount.
    pub async fn receive_counts(&self, url: &str, max: i32) -> Vec<String> {
        let name = aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount;
        self.sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(max)
            .message_system_attribute_names(name.clone())
            .send()
            .await
            .unwrap()
            .messages
            .unwrap_or_default()
            .iter()
            .map(|m| m.attributes.as_ref().unwrap()[&name].clone())
            .collect()
    }

    pub async fn send(&self, url: &str, body: &str) -> String {
        self.sqs
            .send_message()
            .queue_url(url)
            .message_body(body)
            .send()
            .await
            .unwrap()
            .message_id
            .unwrap()
    }

    pub async fn delete(&self, url: &str, receipt_handle: impl Into<String>) {
        self.sqs
            .delete_message()
            .queue_url(url)
            .receipt_handle(receipt_handle)
            .send()
            .await
            .unwrap();
    }

    pub async fn attribute(&self, url: &str, name: &str) -> String {
        let out = self
            .sqs
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(name.into())
            .send()
            .await
            .unwrap();
        out.attributes.unwrap()[&name.into()].clone()
    }
}

/// An SDK client of `base` that does not retry, signing with this key.
pub fn sdk_client(base: &str, access_key: &str, secret: &str, region: &str) -> Client {
    Client::from_conf(sdk_config(base, access_key, secret, region).build())
}

/// The configuration of `sdk_client`, for a test to add to (an HTTP client of its own).
pub fn sdk_config(
    base: &str,
    access_key: &str,
    secret: &str,
    region: &str,
) -> aws_sdk_sqs::config::Builder {
    aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region.to_string()))
        .endpoint_url(base)
        .credentials_provider(Credentials::new(access_key, secret, None, None, "tests"))
        .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled())
        .timeout_config(
            aws_sdk_sqs::config::timeout::TimeoutConfig::builder()
                .operation_timeout(Duration::from_secs(30))
                .build(),
        )
}

/// The error code an SDK error carries (the legacy query code, via x-amzn-query-error).
pub fn code<T: ProvideErrorMetadata + ?Sized>(error: &T) -> String {
    error.code().unwrap_or("<none>").to_string()
}
