//! Leasehold's HTTP edge: one `app(state)` builds the router that serves SQS over HTTP.
//!
//! The engine stays pure; this crate owns the wall clock, the lock around the engine, long
//! polling and the tower layers (body limit, timeout, load shedding, tracing).

mod admin;
mod clock;
mod leases;
mod sqs;
mod state;

use std::sync::Arc;
use std::time::Duration;

use axum::error_handling::HandleErrorLayer;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{BoxError, Router};
use tower::ServiceBuilder;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::trace::TraceLayer;

pub use clock::WallClock;
pub use leasehold_store::{Durability, SqliteStore, StoreError};
pub use state::{AppState, ServerConfig};

/// Largest request body accepted: a 1 MiB batch, base64 growth of binary attributes, JSON.
const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
/// Longer than the longest long poll (20 s), so only a stuck request is cut.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Requests in progress before new ones are shed with 503; long polls hold a slot each.
const MAX_IN_FLIGHT_REQUESTS: usize = 10_000;

/// The whole HTTP application. Tests drive it in-process; the binary serves it.
pub fn app(state: Arc<AppState>) -> Router {
    let mut router = Router::new()
        .route("/", get(sqs::handle).post(sqs::handle))
        .route("/{account}/{queue}", get(sqs::handle).post(sqs::handle))
        .route(
            "/_leasehold/queues/{name}/leases",
            get(leases::queue_leases),
        )
        .route("/metrics", get(leases::metrics));
    if state.config.time_travel {
        router = router.route("/_leasehold/clock/advance", post(admin::advance_clock));
    }
    router
        .with_state(state)
        .layer(
            ServiceBuilder::new()
                .layer(HandleErrorLayer::new(overloaded))
                .load_shed()
                .concurrency_limit(MAX_IN_FLIGHT_REQUESTS)
                .timeout(REQUEST_TIMEOUT),
        )
        .layer(RequestBodyLimitLayer::new(MAX_BODY_BYTES))
        .layer(TraceLayer::new_for_http())
}

async fn overloaded(error: BoxError) -> (StatusCode, String) {
    if error.is::<tower::timeout::error::Elapsed>() {
        (StatusCode::REQUEST_TIMEOUT, "request timed out".into())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("server overloaded: {error}"),
        )
    }
}

/// How often running message move tasks are advanced.
const MOVE_TASK_PERIOD: Duration = Duration::from_millis(100);

/// Serves `app(state)` on `listener` until `shutdown` resolves, then drains open requests.
/// Also drives message move tasks in the background while it serves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let ticker = tokio::spawn(run_move_tasks(state.clone()));
    let served = axum::serve(listener, app(state))
        .with_graceful_shutdown(shutdown)
        .await;
    ticker.abort();
    served
}

async fn run_move_tasks(state: Arc<AppState>) {
    let mut interval = tokio::time::interval(MOVE_TASK_PERIOD);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        interval.tick().await;
        let woken = {
            let mut engine = state.engine();
            let woken = engine.run_move_tasks();
            state.persist_detached(&mut engine);
            woken
        };
        for queue in woken {
            state.wake(&queue);
        }
    }
}
