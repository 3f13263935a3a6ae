//! A minimal SQS client: AWS JSON 1.0 over a pooled hyper HTTP/1 connection.

use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use crate::BenchError;

#[derive(Clone)]
pub struct SqsClient {
    http: Client<HttpConnector, Full<Bytes>>,
    endpoint: String,
}

impl SqsClient {
    pub fn new(endpoint: &str) -> SqsClient {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let http = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(1024)
            .build(connector);
        SqsClient {
            http,
            endpoint: endpoint.trim_end_matches('/').to_string(),
        }
    }

    /// Calls `action` with a JSON body; returns the parsed answer and the call's latency.
    pub async fn call(&self, action: &str, body: &Value) -> Result<(Value, u64), BenchError> {
        self.call_as(action, Bytes::from(body.to_string())).await
    }

    /// Calls `action` with a prepared body, parsing only the shape the caller needs.
    pub async fn call_as<T: serde::de::DeserializeOwned>(
        &self,
        action: &str,
        body: Bytes,
    ) -> Result<(T, u64), BenchError> {
        let started = Instant::now();
        let request = hyper::Request::post(format!("{}/", self.endpoint))
            .header("content-type", "application/x-amz-json-1.0")
                        .header("x-amz-target", format!("AmazonSQS.{action}"))
            // Unsigned, but shaped like SigV4: emulators such as moto route on the service
            // named in the credential scope. Servers that verify signatures will refuse it.
            .header(
                "authorization",
                "AWS4-HMAC-SHA256 Credential=bench/20260101/us-east-1/sqs/aws4_request, SignedHeaders=host, Signature=0",
            )
            .body(Full::new(body))
            .expect("a well-formed request");
        let http_err = |e: &dyn std::fmt::Display| BenchError::Http {
            endpoint: self.endpoint.clone(),
            reason: e.to_string(),
        };
        let response = self.http.request(request).await.map_err(|e| http_err(&e))?;
        let status = response.status().as_u16();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| http_err(&e))?
            .to_bytes();
        let micros = started.elapsed().as_micros() as u64;
        if status != 200 {
            return Err(BenchError::Status {
                action: action.to_string(),
                status,
                body: String::from_utf8_lossy(&bytes).into_owned(),
            });
        }
        let value = serde_json::from_slice(&bytes).map_err(|e| BenchError::Answer {
            action: action.to_string(),
            reason: e.to_string(),
        })?;
        Ok((value, micros))
    }
}
