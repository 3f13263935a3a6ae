//! SQS over the wire, in three steps for any HTTP server: parse (`wire.rs`: which wire, its
//! decoding into one `Request`), apply (`actions/`: checks, conversions and shaping, once, on
//! any `Backend`), render (`wire.rs`: the answer or the error in the asking wire's format,
//! by the one table of AWS's codes in `error.rs`). Both protocols parse into one `Request`
//! and render one JSON-shaped result, so they cannot drift apart.
//!
//! Depends on the engine's types and the backend seam; knows nothing of HTTP servers.

#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod actions;
mod checksum;
mod convert;
mod error;
mod query;
mod query_json;
mod request;
pub mod shapes;
mod wire;
mod xml;

pub use actions::{Attempt, Context, Receive, Step};
pub use checksum::{md5_hex, md5_of_attributes, md5_of_map};
pub use convert::{queue_key, queue_url};
pub use error::{wire_code, ProtocolError, Result, WireCode};
pub use request::{Request, ACTIONS};
pub use wire::{Answer, HttpRequest, Rendered, Wire};
pub use xml::{XML_CONTENT_TYPE, XML_NAMESPACE};

/// The JSON protocol's content type.
pub const JSON_CONTENT_TYPE: &str = "application/x-amz-json-1.0";
/// The prefix of `X-Amz-Target` for SQS.
pub const TARGET_PREFIX: &str = "AmazonSQS.";

/// The JSON body of an error, as AWS sends it.
pub(crate) fn json_error_body(error: &ProtocolError) -> serde_json::Value {
    serde_json::json!({
        "__type": wire_code(error).json_type,
        "message": error.to_string(),
    })
}

/// The `x-amzn-query-error` header value SDKs read the legacy code from.
pub(crate) fn query_error_header(error: &ProtocolError) -> String {
    let code = wire_code(error);
    let fault = if code.sender_fault {
        "Sender"
    } else {
        "Receiver"
    };
    format!("{};{fault}", code.query_code)
}
