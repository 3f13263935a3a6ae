//! Each message's life as an OpenTelemetry trace (`leasehold serve --otlp-endpoint`): a
//! `Backend` (`Traced`) in front of the real one watches sends, receives, visibility changes
//! and deletes go by, and tells each traced message's send, its wait in the queue, each lease
//! (how long it was held, whether it ran out) and its delete (late or not) as spans in the
//! producer's trace, exported over OTLP/HTTP.
//!
//! Neither the engine nor the server knows of it: the binary puts it in front of the backend
//! when asked. Every span's times are the server's clock's, the one its leases run on.

#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod book;
mod context;
mod export;
mod spans;
mod traced;

use std::sync::Arc;

use leasehold_backend::Backend;
use leasehold_engine::{Clock, LeaseMode};
use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;

pub use export::traces_url;
pub use traced::{Traced, TRACED_MESSAGES};

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("the OTLP endpoint {0}")]
    Endpoint(String),
    #[error("the OTLP exporter: {0}")]
    Exporter(String),
    #[error("the sample ratio {0} is not between 0 and 1")]
    SampleRatio(f64),
}

/// A server's tracing: the traced backend to serve, and what to stop when the server stops.
pub struct Tracing {
    pub backend: Arc<Traced>,
    provider: SdkTracerProvider,
}

impl Tracing {
    /// Traces `backend`'s messages (served in `lease_mode`) on `clock`, exporting to
    /// `endpoint` (a collector's base URL or its `/v1/traces`); new traces (a message whose
    /// producer sent no trace context) are sampled at `sample_ratio`. Call inside the
    /// server's tokio runtime.
    pub fn start(
        (backend, lease_mode): (Arc<dyn Backend>, LeaseMode),
        clock: Arc<dyn Clock>,
        endpoint: &str,
        sample_ratio: f64,
    ) -> Result<Tracing, TraceError> {
        let provider = export::provider(endpoint, sample_ratio, "leasehold")?;
        let spans = spans::Spans::new(provider.tracer("leasehold"));
        let backend = Arc::new(Traced::new(backend, clock, spans, lease_mode));
        Ok(Tracing { backend, provider })
    }

    /// Ends the open leases' spans and sends what is left: when the server has stopped.
    /// Blocks until the exporter is done (or gives up): call off the async workers.
    pub fn stop(self) {
        self.backend.stop();
        if let Err(error) = self.provider.shutdown() {
            tracing::warn!(%error, "the last spans could not be exported");
        }
    }
}

/// A consumer's tracing (`leasehold work --otlp-endpoint`): the global tracer and W3C
/// propagator the worker's `process` spans use, exporting as the server does.
pub struct GlobalTracing {
    provider: SdkTracerProvider,
}

impl GlobalTracing {
    /// Installs them, for `service`. Call inside the program's tokio runtime.
    pub fn install(
        endpoint: &str,
        sample_ratio: f64,
        service: &'static str,
    ) -> Result<GlobalTracing, TraceError> {
        let provider = export::provider(endpoint, sample_ratio, service)?;
        opentelemetry::global::set_tracer_provider(provider.clone());
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        Ok(GlobalTracing { provider })
    }

    /// Sends what is left. Blocks until the exporter is done: call off the async workers.
    pub fn stop(self) {
        if let Err(error) = self.provider.shutdown() {
            tracing::warn!(%error, "the last spans could not be exported");
        }
    }
}

/// The W3C `traceparent` of the current span, if there is one: for a command run for a
/// message (`TRACEPARENT`), so that it can join the message's trace.
pub fn current_traceparent() -> Option<String> {
    let mut carrier = std::collections::HashMap::new();
    TraceContextPropagator::new().inject_context(&opentelemetry::Context::current(), &mut carrier);
    carrier.remove("traceparent")
}
