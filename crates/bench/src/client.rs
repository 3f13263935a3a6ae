//! A minimal SQS client: AWS JSON 1.0 over a pooled hyper HTTP/1 connection.

use std::time::{Instant, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, SignableBody, SignableRequest, SigningParams, SigningSettings,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use crate::BenchError;

/// Signs each request with SigV4 over its body, as the AWS SDKs do, for a server that checks
/// signatures (`leasehold serve --credentials`).
#[derive(Clone)]
pub struct Signer {
    identity: Identity,
    region: String,
}

impl Signer {
    pub fn new(access_key_id: &str, secret_access_key: &str, region: &str) -> Signer {
        let credentials = Credentials::new(access_key_id, secret_access_key, None, None, "bench");
        Signer {
            identity: credentials.into(),
            region: region.to_string(),
        }
    }

    /// The headers that sign a JSON 1.0 POST of `body` to `uri` (`host` is signed, and sent
    /// by the HTTP client from the URI's authority).
    fn headers(
        &self,
        uri: &str,
        host: &str,
        target: &str,
        body: &[u8],
    ) -> Result<Vec<(String, String)>, BenchError> {
        let params: SigningParams<'_> = v4::SigningParams::builder()
            .identity(&self.identity)
            .region(&self.region)
            .name("sqs")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| BenchError::Signing(e.to_string()))?
            .into();
        let headers = [
            ("host", host),
            ("content-type", JSON_1_0),
            ("x-amz-target", target),
        ];
        let signable =
            SignableRequest::new("POST", uri, headers.into_iter(), SignableBody::Bytes(body))
                .map_err(|e| BenchError::Signing(e.to_string()))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| BenchError::Signing(e.to_string()))?
            .into_parts();
        Ok(instructions
            .headers()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect())
    }
}

/// The region only: the key stays out of logs.
impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("region", &self.region)
            .finish()
    }
}

const JSON_1_0: &str = "application/x-amz-json-1.0";

#[derive(Clone)]
pub struct SqsClient {
    http: Client<HttpConnector, Full<Bytes>>,
    endpoint: String,
    /// The endpoint's authority, the `host` a signature covers.
    host: String,
    signer: Option<Signer>,
}

impl SqsClient {
    pub fn new(endpoint: &str, signer: Option<Signer>) -> SqsClient {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let http = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(1024)
            .build(connector);
        let endpoint = endpoint.trim_end_matches('/').to_string();
        let host = endpoint
            .split_once("://")
            .map_or(endpoint.as_str(), |(_, rest)| rest)
            .split('/')
            .next()
            .unwrap_or_default()
            .to_string();
        SqsClient {
            http,
            endpoint,
            host,
            signer,
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
        let uri = format!("{}/", self.endpoint);
        let target = format!("AmazonSQS.{action}");
        // The host the signature covers is the one sent: hyper keeps a Host set here.
        let mut request = hyper::Request::post(&uri)
            .header("host", &self.host)
            .header("content-type", JSON_1_0)
            .header("x-amz-target", &target);
        match &self.signer {
            Some(signer) => {
                for (name, value) in signer.headers(&uri, &self.host, &target, &body)? {
                    request = request.header(name, value);
                }
            }
            // Unsigned, but shaped like SigV4: emulators such as moto route on the service
            // named in the credential scope. Servers that verify signatures will refuse it.
            None => {
                request = request.header(
                    "authorization",
                    "AWS4-HMAC-SHA256 Credential=bench/20260101/us-east-1/sqs/aws4_request, SignedHeaders=host, Signature=0",
                );
            }
        }
        let request = request
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
