//! The HTTP floor for `scripts/bench-cores`: the axum and hyper stack Leasehold serves on,
//! answering every request with a fixed reply after reading its body (CreateQueue: a queue
//! URL; anything else: a SendMessageBatch answer of ten), so that what Leasehold adds to the
//! stack has a measure.
//!
//!   cargo run --release -p leasehold-server --example floor -- 127.0.0.1:9700

use axum::body::Bytes;
use axum::http::{header, HeaderMap};
use axum::routing::post;
use axum::Router;

/// A SendMessageBatch answer of ten successful entries, built once.
fn batch_answer() -> String {
    let entries: Vec<String> = (0..10)
        .map(|i| {
            format!(
                r#"{{"Id":"m{i}","MessageId":"00000000-0000-4000-8000-00000000000{i}","MD5OfMessageBody":"d41d8cd98f00b204e9800998ecf8427e"}}"#
            )
        })
        .collect();
    format!(r#"{{"Successful":[{}],"Failed":[]}}"#, entries.join(","))
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let address = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9700".into());
    let listener = tokio::net::TcpListener::bind(&address).await?;
    // Both live as long as the process: the handler copies nothing per request.
    let address: &'static str = Box::leak(address.into_boxed_str());
    let batch: &'static str = Box::leak(batch_answer().into_boxed_str());
    let app = Router::new().route(
        "/",
        post(move |headers: HeaderMap, body: Bytes| async move {
            let target = headers
                .get("x-amz-target")
                .and_then(|t| t.to_str().ok())
                .unwrap_or_default();
            let reply = if target.ends_with("CreateQueue") {
                format!(
                    r#"{{"QueueUrl":"http://{address}/000000000000/floor-{}"}}"#,
                    body.len()
                )
            } else {
                batch.to_string()
            };
            (
                [(header::CONTENT_TYPE, "application/x-amz-json-1.0")],
                reply,
            )
        }),
    );
    axum::serve(listener, app).await
}
