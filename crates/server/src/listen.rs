//! The accept loop: a bounded number of connections, TLS when configured, header and idle
//! timeouts, and a shutdown that ends within `SHUTDOWN_GRACE` whatever the clients do.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// How long shutdown lets open requests finish before it closes their connections.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);
/// File descriptors kept free of connections: the data file, its log, the listener, logs.
const RESERVED_DESCRIPTORS: u64 = 64;
/// Never more connections than this, however many descriptors the process may open.
const MAX_CONNECTIONS: u64 = 50_000;

/// Raises the soft limit on open files to the hard limit, and answers how many connections
/// the server may then hold while keeping descriptors for everything else.
pub fn connection_limit() -> usize {
    let soft = rlimit::increase_nofile_limit(u64::MAX)
        .unwrap_or_else(|_| rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(1_024, |l| l.0));
    soft.saturating_sub(RESERVED_DESCRIPTORS)
        .clamp(1, MAX_CONNECTIONS) as usize
}

/// Serves `app` on `listener`, at most `max_connections` at once, each closed when a
/// request's head takes longer than `idle_timeout` to arrive (which also ends idle keep-alive
/// connections and slowloris ones), until `shutdown` resolves; then stops accepting, runs
/// `on_shutdown` (which answers waiting receives), lets requests in progress finish for up
/// to `SHUTDOWN_GRACE`, and closes whatever is left.
pub async fn serve_connections(
    listener: TcpListener,
    app: Router,
    tls: Option<crate::tls::TlsAcceptor>,
    (max_connections, idle_timeout): (usize, Duration),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    on_shutdown: impl FnOnce(),
) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(max_connections));
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(idle_timeout);
    let mut full_logged = false;
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            permit = permits.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
        };
        // Logged once each time the limit is reached, not once per connection.
        if permits.available_permits() == 0 && !full_logged {
            full_logged = true;
            tracing::warn!(
                max_connections,
                "connection limit reached: new connections wait in the listen backlog"
            );
        } else if permits.available_permits() > max_connections / 10 {
            full_logged = false;
        }
        let (stream, _) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors or a connection reset before accept: not fatal.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let watcher = graceful.watcher();
        let (builder, tls) = (builder.clone(), tls.clone());
        connections.spawn(async move {
            let _permit = permit;
            let Some(tls) = tls else {
                let _ = watcher
                    .watch(builder.serve_connection(TokioIo::new(stream), service))
                    .await;
                return;
            };
            // A handshake is held to the same time as a request's head.
            match tokio::time::timeout(idle_timeout, tls.accept(stream)).await {
                Ok(Ok(stream)) => {
                    let _ = watcher
                        .watch(builder.serve_connection(TokioIo::new(stream), service))
                        .await;
                }
                Ok(Err(error)) => tracing::debug!(%error, "TLS handshake failed"),
                Err(_) => tracing::debug!("TLS handshake timed out"),
            }
        });
    }
    drop(listener);
    on_shutdown();
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            open = connections.len(),
            "closing connections still open after the shutdown grace"
        );
    }
    connections.shutdown().await;
    Ok(())
}
