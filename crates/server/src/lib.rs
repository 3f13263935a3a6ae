//! Leasehold's HTTP edge: one `app(state)` builds the router that serves SQS over HTTP.
//!
//! The engine stays pure and the backend holds the queues; this crate owns the wall clock,
//! long polling, the accept loop (connection limit, timeouts, bounded shutdown) and the tower
//! layers (timeout, tracing). Request limits live in `state` and `sqs`.

#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod admin;
pub mod advice;
pub mod auth;
mod clock;
pub mod dashboard;
mod declare;
mod host_check;
pub mod hosts;
mod lease_doc;
mod leases;
pub mod listen;
mod metrics;
pub mod pressure;
mod sqs;
mod state;
pub mod tls;

use std::sync::Arc;
use std::time::Duration;

use axum::error_handling::HandleErrorLayer;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{BoxError, Router};
use leasehold_protocol::ProtocolError;
use tower::ServiceBuilder;
use tower_http::trace::TraceLayer;

pub use clock::WallClock;
pub use declare::{declare_queues, Applied, DeclareError, DeclaredQueue};
pub use lease_doc::{HoldBucket, LeaseReportDoc, LeaseSettings, MessageCounts, Quantiles};
pub use state::{AppState, Limits, ServerConfig};

/// Longer than the longest long poll (20 s), so only a stuck request is cut.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The whole HTTP application. Tests drive it in-process; the binary serves it. With
/// credentials configured, the admin routes want the admin token here (`admin::guard`).
pub fn app(state: Arc<AppState>) -> Router {
    let guarded = admin_routes(&state)
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            admin::guard,
        ))
        .route_layer(axum::middleware::from_fn(admin::same_site))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            host_check::check_admin,
        ));
    let router = Router::new()
        .route("/", get(dashboard::root).post(sqs::handle))
        .route("/{account}/{queue}", get(sqs::handle).post(sqs::handle))
        .route(
            "/queue/{region}/{account}/{queue}",
            get(sqs::handle).post(sqs::handle),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            host_check::check_sqs,
        ))
        .merge(guarded)
        .route("/health", get(admin::health))
        .route("/ready", get(admin::ready));
    layered(router.with_state(state))
}

/// The admin and observability routes alone, open, for the separate `--admin-bind` listener,
/// its root the dashboard.
pub fn admin_app(state: Arc<AppState>) -> Router {
    let router = admin_routes(&state)
        .route_layer(axum::middleware::from_fn(admin::same_site))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            host_check::check_admin,
        ))
        .route(
            "/",
            get(|| async { axum::response::Redirect::to(dashboard::PATH) }),
        )
        .route("/health", get(admin::health))
        .route("/ready", get(admin::ready));
    layered(router.with_state(state))
}

/// `/_leasehold/*` (the dashboard among them), `/metrics` and `/metrics/queues`.
fn admin_routes(state: &AppState) -> Router<Arc<AppState>> {
    let mut router = dashboard::routes()
        .route(
            "/_leasehold/queues/{name}/leases",
            get(leases::queue_leases),
        )
        .route("/metrics", get(metrics::totals))
        .route("/metrics/queues", get(metrics::queues));
    if state.config.time_travel {
        router = router.route("/_leasehold/clock/advance", post(admin::advance_clock));
    }
    router
}

/// The tower layers every listener's routes share: a timeout and tracing.
fn layered(router: Router) -> Router {
    router
        .layer(
            ServiceBuilder::new()
                .layer(HandleErrorLayer::new(timed_out))
                .timeout(REQUEST_TIMEOUT),
        )
        .layer(TraceLayer::new_for_http())
}

/// The only error the layers make: a request that outlived `REQUEST_TIMEOUT` (a client
/// trickling its body, say), answered in its wire's format.
async fn timed_out(headers: HeaderMap, _error: BoxError) -> Response {
    let error = ProtocolError::RequestTimeout(REQUEST_TIMEOUT.as_secs());
    sqs::error_response(&headers, &error, &state::request_id())
}

/// How often running message move tasks are advanced.
const MOVE_TASK_PERIOD: Duration = Duration::from_millis(100);

/// Serves `app(state)` on `listener` until `shutdown` resolves, then answers waiting
/// receives, lets open requests finish within `listen::SHUTDOWN_GRACE` and closes the rest.
/// Also drives message move tasks in the background while it serves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, state, Listeners::default(), shutdown).await
}

/// What else `serve_with` serves: TLS on the main listener, and the admin routes on one of
/// their own (`--admin-bind`).
#[derive(Default)]
pub struct Listeners {
    pub tls: Option<tls::TlsAcceptor>,
    pub admin: Option<tokio::net::TcpListener>,
}

/// `serve`, with TLS and an admin listener when given; the admin listener stops with the
/// main one.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    listeners: Listeners,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let ticker = tokio::spawn(run_move_tasks(state.clone()));
    let limits = (listen::connection_limit(), state.config.limits.idle_timeout);
    let (stop_admin, admin_stopped) = tokio::sync::oneshot::channel::<()>();
    let admin = listeners.admin.map(|admin| {
        let app = admin_app(state.clone());
        let tls = listeners.tls.clone();
        tokio::spawn(async move {
            let stopped = async {
                let _ = admin_stopped.await;
            };
            listen::serve_connections(admin, app, tls, limits, stopped, || {}).await
        })
    });
    let served = listen::serve_connections(
        listener,
        app(state.clone()),
        listeners.tls,
        limits,
        shutdown,
        || state.begin_shutdown(),
    )
    .await;
    let _ = stop_admin.send(());
    if let Some(admin) = admin {
        let _ = admin.await;
    }
    ticker.abort();
    // Wait until the ticker has let go of the state, so the store is closed on return.
    let _ = ticker.await;
    state.backend.flush().await;
    served
}

async fn run_move_tasks(state: Arc<AppState>) {
    let mut interval = tokio::time::interval(MOVE_TASK_PERIOD);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        interval.tick().await;
        state.memory.sample();
        state.backend.tick().await;
    }
}
