//! Spans out over OTLP/HTTP (protobuf), batched, from the SDK's own export thread; the HTTP
//! requests themselves run on the server's tokio runtime (`RuntimeClient`).

use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider,
};
use opentelemetry_sdk::Resource;

use crate::TraceError;

/// How long one export may take: within the 5 s the SDK gives the last one at shutdown.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(4);

/// An OTLP/HTTP client on the server's tokio runtime: the SDK's export thread waits for each
/// request's task, which runs where reqwest's I/O can.
#[derive(Debug)]
struct RuntimeClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for RuntimeClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let request = reqwest::Request::try_from(request)?;
        let task = self.runtime.spawn(async move {
            let response = client.execute(request).await?;
            let status = response.status();
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, body))
        });
        let (status, body) = task.await??;
        let mut response = Response::new(body);
        *response.status_mut() = status;
        Ok(response)
    }
}

/// Where spans go: an OTLP endpoint as `OTEL_EXPORTER_OTLP_ENDPOINT` gives it (the
/// collector's base URL, to which `/v1/traces` is added), or already the traces URL.
pub fn traces_url(endpoint: &str) -> Result<String, TraceError> {
    let url = reqwest::Url::parse(endpoint)
        .map_err(|e| TraceError::Endpoint(format!("{endpoint}: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(TraceError::Endpoint(format!(
            "{endpoint}: not an http:// or https:// URL"
        )));
    }
    let trimmed = endpoint.trim_end_matches('/');
    Ok(match trimmed.ends_with("/v1/traces") {
        true => trimmed.to_string(),
        false => format!("{trimmed}/v1/traces"),
    })
}

/// The tracer provider of `service`: spans sampled as their producer decided, else
/// `sample_ratio` of new traces; batched and sent every half second.
pub fn provider(
    endpoint: &str,
    sample_ratio: f64,
    service: &'static str,
) -> Result<SdkTracerProvider, TraceError> {
    if !(0.0..=1.0).contains(&sample_ratio) {
        return Err(TraceError::SampleRatio(sample_ratio));
    }
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|_| TraceError::Endpoint("tracing starts inside the server's runtime".into()))?;
    let client = RuntimeClient {
        client: reqwest::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .no_proxy()
            .build()
            .map_err(|e| TraceError::Exporter(e.to_string()))?,
        runtime,
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(traces_url(endpoint)?)
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| TraceError::Exporter(e.to_string()))?;
    let batches = BatchConfigBuilder::default()
        .with_scheduled_delay(Duration::from_millis(500))
        .build();
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(batches)
        .build();
    let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(sample_ratio)));
    Ok(SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(sampler)
        .with_resource(Resource::builder().with_service_name(service).build())
        .build())
}
