//! Both ends of a request, for any HTTP server: which wire a request speaks and its decoding
//! into a `Request` with its `Context` (step one), and the answer or the error rendered in the
//! format of the wire that asked (step three). Step two, applying the request, is
//! `execute.rs`. The server hands in the few HTTP facts read here (`HttpRequest`) and sends
//! back what `Rendered` says; it knows nothing of targets, forms, XML or error codes.

use leasehold_engine::{is_region, EngineError, MAX_MESSAGE_SIZE};
use serde::Serialize;
use serde_json::Value;

use crate::actions::Context;
use crate::convert::region_of_host;
use crate::error::{wire_code, ProtocolError, Result};
use crate::query::{form_params, parse_query};
use crate::query_json::{query_json_error, query_json_response};
use crate::request::Request;
use crate::shapes::ReceiveMessageOutput;
use crate::xml::{xml_error, xml_response, XML_CONTENT_TYPE};
use crate::{json_error_body, query_error_header, JSON_CONTENT_TYPE, TARGET_PREFIX};

/// The content type of the query protocol's JSON answers.
const PLAIN_JSON_CONTENT_TYPE: &str = "application/json";

/// Which protocol a request spoke, so the answer speaks it too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// AWS JSON 1.0: `X-Amz-Target` names the action.
    Json,
    /// The query protocol, answered in XML.
    Query,
    /// The query protocol from a client that accepts `application/json`: AWS answers with the
    /// XML tree written as JSON.
    QueryAsJson,
}

/// What of an HTTP request the protocol reads.
#[derive(Clone, Copy, Debug, Default)]
pub struct HttpRequest<'a> {
    pub is_post: bool,
    pub path: &'a str,
    /// The URL's query string, without the `?`.
    pub query: &'a str,
    pub host: &'a str,
    /// What queue URLs start with (the server's public URL, or `https://HOST` behind TLS);
    /// None: `http://HOST`.
    pub origin: Option<&'a str>,
    pub target: Option<&'a str>,
    pub accept: Option<&'a str>,
    pub authorization: Option<&'a str>,
    pub trace_id: Option<&'a str>,
}

impl HttpRequest<'_> {
    pub fn wire(&self) -> Wire {
        let accepts_json = self
            .accept
            .is_some_and(|a| a.contains(PLAIN_JSON_CONTENT_TYPE));
        match (self.target, accepts_json) {
            (Some(_), _) => Wire::Json,
            (None, true) => Wire::QueryAsJson,
            (None, false) => Wire::Query,
        }
    }

    /// Step one: the request and its context. The body is the whole body, already read.
    pub fn parse(&self, body: &[u8]) -> Result<(Context, Request)> {
        let ctx = Context {
            host: self.host.to_string(),
            origin: self
                .origin
                .map_or_else(|| format!("http://{}", self.host), str::to_string),
            region: self.region(),
            account: None,
        };
        let mut request = match self.target {
            Some(target) => {
                let action = target
                    .strip_prefix(TARGET_PREFIX)
                    .ok_or_else(|| ProtocolError::UnknownOperation(target.to_string()))?;
                Request::from_json(action, body)?
            }
            None => self.parse_form(body)?,
        };
        if let Some(trace) = self.trace_id {
            request.add_trace_header(trace);
        }
        Ok((ctx, request))
    }

    /// Query parameters come from the URL and, on a POST, the form body. A request sent to a
    /// queue's URL (`/ACCOUNT/NAME`, or `/queue/REGION/ACCOUNT/NAME` for a queue of another
    /// region) names its queue by the path.
    fn parse_form(&self, body: &[u8]) -> Result<Request> {
        let mut params = form_params(self.query.as_bytes());
        if self.is_post {
            params.extend(form_params(body));
        }
        let segments: Vec<&str> = self.path.trim_matches('/').split('/').collect();
        let is_queue_path = matches!(segments.as_slice(), [_, _] | ["queue", _, _, _]);
        let queue_url = is_queue_path.then(|| format!("http://{}{}", self.host, self.path));
        parse_query(&params, queue_url)
    }

    /// The region the request is made in, as AWS reads it: the SigV4 credential scope (of
    /// the `Authorization` header, or `X-Amz-Credential` of a presigned URL), else the host
    /// (`sqs.REGION.…`). None leaves the engine's own region.
    fn region(&self) -> Option<String> {
        let signed = self
            .authorization
            .and_then(|a| a.split_once("Credential="))
            .map(|(_, rest)| {
                rest.split([',', ' '])
                    .next()
                    .unwrap_or_default()
                    .to_string()
            });
        let presigned = || self.query_param("X-Amz-Credential");
        let scope_region = |credential: String| {
            // `AKID/20261203/eu-central-1/sqs/aws4_request`.
            let region = credential.split('/').nth(2)?.to_string();
            is_region(&region).then_some(region)
        };
        signed
            .or_else(presigned)
            .and_then(scope_region)
            .or_else(|| region_of_host(self.host).map(str::to_string))
    }

    fn query_param(&self, name: &str) -> Option<String> {
        form_params(self.query.as_bytes())
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, value)| value)
    }

    /// A query-string request that carries a SigV4 (or SigV2) presigned signature.
    pub fn is_presigned(&self) -> bool {
        let has = |name: &str| self.query_param(name).is_some();
        (has("X-Amz-Signature") && has("X-Amz-Credential") && has("X-Amz-Algorithm"))
            || (has("Signature") && has("AWSAccessKeyId"))
    }

    /// The error for a body past the server's limit (`seen` bytes so far, `start` the first
    /// of them): AWS's error for the action, found in the target, the URL or the form's start.
    pub fn too_large(&self, start: &[u8], seen: usize, limit: usize) -> ProtocolError {
        let from_form = |encoded: &[u8]| {
            form_params(encoded)
                .into_iter()
                .find(|(name, _)| name == "Action")
                .map(|(_, action)| action)
        };
        let action = self
            .target
            .and_then(|t| t.strip_prefix(TARGET_PREFIX))
            .map(str::to_string)
            .or_else(|| from_form(self.query.as_bytes()))
            .or_else(|| from_form(&start[..start.len().min(256)]));
        match action.as_deref() {
            Some("SendMessageBatch") => ProtocolError::Engine(EngineError::BatchRequestTooLong(
                MAX_MESSAGE_SIZE as usize,
                seen,
            )),
            Some("SendMessage") => ProtocolError::InvalidParameterValue(format!(
                "One or more parameters are invalid. Reason: Message must be shorter than {MAX_MESSAGE_SIZE} bytes."
            )),
            _ => ProtocolError::InvalidParameterValue(format!(
                "The request body is larger than {limit} bytes."
            )),
        }
    }
}

/// A successful answer, before it is put in a wire format. It stays typed until then, so
/// the JSON wire (what SDKs speak by default) writes it in one pass, its members in the
/// shape's order; only the query wires (XML, and JSON for a query request that accepts it)
/// go through a `serde_json::Value`.
pub enum Answer {
    Typed(Box<dyn TypedAnswer>),
    Received(ReceiveMessageOutput),
}

/// An action's typed output, written as either wire needs it.
pub trait TypedAnswer: Send {
    fn json(&self) -> String;
    fn document(self: Box<Self>) -> Value;
}

impl<T: Serialize + Send> TypedAnswer for T {
    fn json(&self) -> String {
        serde_json::to_string(self).expect("response shapes always serialise")
    }

    fn document(self: Box<Self>) -> Value {
        serde_json::to_value(*self).expect("response shapes always serialise")
    }
}

impl Answer {
    fn json(&self) -> String {
        match self {
            Answer::Typed(output) => output.json(),
            Answer::Received(output) => output.json(),
        }
    }

    fn document(self) -> Value {
        match self {
            Answer::Typed(output) => output.document(),
            Answer::Received(output) => Box::new(output).document(),
        }
    }
}

/// An answer as the HTTP server sends it.
#[derive(Debug, PartialEq, Eq)]
pub struct Rendered {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
    /// The `x-amzn-query-error` header, from which SDKs read the legacy error code.
    pub query_error: Option<String>,
}

impl Wire {
    /// Step three, for a success.
    pub fn render(self, action: &str, answer: Answer, request_id: &str) -> Rendered {
        let (content_type, body) = match self {
            Wire::Json => (JSON_CONTENT_TYPE, answer.json()),
            Wire::Query => (
                XML_CONTENT_TYPE,
                xml_response(action, &answer.document(), request_id),
            ),
            Wire::QueryAsJson => (
                PLAIN_JSON_CONTENT_TYPE,
                query_json_response(action, &answer.document(), request_id).to_string(),
            ),
        };
        Rendered {
            status: 200,
            content_type,
            body,
            query_error: None,
        }
    }

    /// Step three, for an error.
    pub fn render_error(self, error: &ProtocolError, request_id: &str) -> Rendered {
        let status = wire_code(error).status;
        let (content_type, body, query_error) = match self {
            Wire::Json => (
                JSON_CONTENT_TYPE,
                json_error_body(error).to_string(),
                Some(query_error_header(error)),
            ),
            // A request naming no action gets AWS's bare XML element whatever it accepts.
            Wire::QueryAsJson if *error != ProtocolError::NoAction => (
                PLAIN_JSON_CONTENT_TYPE,
                query_json_error(error, request_id).to_string(),
                None,
            ),
            Wire::Query | Wire::QueryAsJson => {
                (XML_CONTENT_TYPE, xml_error(error, request_id), None)
            }
        };
        Rendered {
            status,
            content_type,
            body,
            query_error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_credential_scope_names_the_region_before_the_host() {
        let signed = HttpRequest {
            host: "sqs.us-west-2.localhost",
            authorization: Some("AWS4-HMAC-SHA256 Credential=test/20261203/eu-central-1/sqs/aws4_request, SignedHeaders=host, Signature=abc"),
            ..HttpRequest::default()
        };
        assert_eq!(signed.region().as_deref(), Some("eu-central-1"));
        let presigned = HttpRequest {
            host: "localhost",
            query: "X-Amz-Credential=test%2F20261203%2Fap-south-1%2Fsqs%2Faws4_request",
            ..HttpRequest::default()
        };
        assert_eq!(presigned.region().as_deref(), Some("ap-south-1"));
        let by_host = HttpRequest {
            host: "sqs.us-west-2.localhost:9324",
            ..HttpRequest::default()
        };
        assert_eq!(by_host.region().as_deref(), Some("us-west-2"));
        let plain = HttpRequest {
            host: "127.0.0.1:9324",
            ..HttpRequest::default()
        };
        assert_eq!(plain.region(), None);
    }

    #[test]
    fn the_wire_follows_the_target_then_what_the_client_accepts() {
        let json = HttpRequest {
            target: Some("AmazonSQS.ListQueues"),
            accept: Some("application/json"),
            ..HttpRequest::default()
        };
        assert_eq!(json.wire(), Wire::Json);
        let query_json = HttpRequest {
            accept: Some("application/json"),
            ..HttpRequest::default()
        };
        assert_eq!(query_json.wire(), Wire::QueryAsJson);
        assert_eq!(HttpRequest::default().wire(), Wire::Query);
    }
}
