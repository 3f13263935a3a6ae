//! SQS wire formats: AWS JSON 1.0 and the query/XML protocol, their validation, and the one
//! table that maps every error to AWS's codes. Both protocols parse into one `Request` and
//! render one JSON-shaped result, so they cannot drift apart.
//!
//! Depends on the engine and nothing else of Leasehold; knows nothing of HTTP servers.

#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod checksum;
mod convert;
mod error;
mod execute;
mod query;
mod query_json;
mod request;
pub mod shapes;
mod wire;
mod xml;

pub use checksum::{md5_hex, md5_of_attributes, md5_of_map};
pub use convert::{queue_name, queue_url};
pub use error::{wire_code, ProtocolError, Result, WireCode};
pub use execute::{
    execute, execute_prepared, receive, receive_wait_seconds, take_messages, Context, Prepared,
    Taken,
};
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
