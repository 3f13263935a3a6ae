//! The query protocol's answers: the JSON-shaped result rendered as AWS's XML.

use std::fmt::Write as _;

use serde_json::Value;

use crate::error::{wire_code, ProtocolError};

pub const XML_NAMESPACE: &str = "http://queue.amazonaws.com/doc/2012-11-05/";
pub const XML_CONTENT_TYPE: &str = "text/xml";

/// Escapes text for XML. Carriage returns are written as references, since a parser would
/// otherwise turn them into line feeds and change message bodies. A character XML 1.0 cannot
/// hold at all (a NUL, U+FFFE; only an error can echo one, since a message body may not
/// contain them) is written as U+FFFD, so the answer still parses.
fn escape(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            c if !leasehold_engine::is_allowed_char(c) => out.push('\u{fffd}'),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\r' => out.push_str("&#xD;"),
            c => out.push(c),
        }
    }
}

fn element(name: &str, inner: impl FnOnce(&mut String), out: &mut String) {
    let _ = write!(out, "<{name}>");
    inner(out);
    let _ = write!(out, "</{name}>");
}

fn scalar(value: &Value, out: &mut String) {
    match value {
        Value::String(s) => escape(s, out),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        _ => {}
    }
}

/// How a list member repeats: the element each item is written as.
fn list_item_name(action: &str, member: &str) -> String {
    match member {
        "QueueUrls" | "queueUrls" => "QueueUrl".into(),
        "Messages" => "Message".into(),
        "Successful" => format!("{action}ResultEntry"),
        "Failed" => "BatchResultErrorEntry".into(),
        "Results" => "ListMessageMoveTasksResultEntry".into(),
        other => other.trim_end_matches('s').into(),
    }
}

/// Maps are written as repeated entries: the entry element, and its key and value names.
pub(crate) fn map_shape(member: &str) -> Option<(&'static str, &'static str)> {
    match member {
        "Attributes" => Some(("Attribute", "Name")),
        "MessageAttributes" => Some(("MessageAttribute", "Name")),
        "Tags" => Some(("Tag", "Key")),
        _ => None,
    }
}

fn members(action: &str, object: &serde_json::Map<String, Value>, out: &mut String) {
    for (member, value) in object {
        match value {
            Value::Array(items) => {
                let name = list_item_name(action, member);
                for item in items {
                    element(&name, |out| node(action, item, out), out);
                }
            }
            Value::Object(map) => match map_shape(member) {
                Some((entry, key)) => {
                    for (k, v) in map {
                        element(
                            entry,
                            |out| {
                                element(key, |out| escape(k, out), out);
                                element("Value", |out| node(action, v, out), out);
                            },
                            out,
                        );
                    }
                }
                None => element(member, |out| members(action, map, out), out),
            },
            Value::Null => {}
            scalar_value => element(member, |out| scalar(scalar_value, out), out),
        }
    }
}

fn node(action: &str, value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => members(action, map, out),
        other => scalar(other, out),
    }
}

/// Actions whose answer carries no result element, only the response metadata.
const NO_RESULT: &[&str] = &[
    "DeleteQueue",
    "SetQueueAttributes",
    "PurgeQueue",
    "DeleteMessage",
    "ChangeMessageVisibility",
    "TagQueue",
    "UntagQueue",
    "AddPermission",
    "RemovePermission",
];

/// Whether the action's answer carries a result element.
pub(crate) fn has_result(action: &str) -> bool {
    !NO_RESULT.contains(&action)
}

/// `<ActionResponse><ActionResult>...</ActionResult><ResponseMetadata>...`, as AWS answers.
pub fn xml_response(action: &str, result: &Value, request_id: &str) -> String {
    let mut out = String::from("<?xml version=\"1.0\"?>");
    let _ = write!(out, "<{action}Response xmlns=\"{XML_NAMESPACE}\">");
    if has_result(action) {
        let mut inner = String::new();
        node(action, result, &mut inner);
        // An empty result is the bare element, as AWS writes it (`<ReceiveMessageResult/>`
        // for a receive that found nothing).
        match inner.is_empty() {
            true => {
                let _ = write!(out, "<{action}Result/>");
            }
            false => element(
                &format!("{action}Result"),
                |out| out.push_str(&inner),
                &mut out,
            ),
        }
    }
    element(
        "ResponseMetadata",
        |out| element("RequestId", |out| escape(request_id, out), out),
        &mut out,
    );
    let _ = write!(out, "</{action}Response>");
    out
}

/// An `<ErrorResponse>` with the legacy query code.
pub fn xml_error(error: &ProtocolError, request_id: &str) -> String {
    if *error == ProtocolError::NoAction {
        // AWS's answer to a request that names no action: the bare element, in any format.
        return "<UnknownOperationException/>".into();
    }
    let code = wire_code(error);
    let mut out = String::from("<?xml version=\"1.0\"?>");
    let _ = write!(out, "<ErrorResponse xmlns=\"{XML_NAMESPACE}\">");
    element(
        "Error",
        |out| {
            element(
                "Type",
                |out| {
                    out.push_str(if code.sender_fault {
                        "Sender"
                    } else {
                        "Receiver"
                    })
                },
                out,
            );
            element("Code", |out| escape(code.query_code, out), out);
            element("Message", |out| escape(&error.query_message(), out), out);
            out.push_str("<Detail/>");
        },
        &mut out,
    );
    element("RequestId", |out| escape(request_id, out), &mut out);
    out.push_str("</ErrorResponse>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn characters_xml_cannot_hold_become_replacement_characters() {
        let mut out = String::new();
        escape("a\u{0}b\u{fffe}c\u{1}\t", &mut out);
        assert_eq!(out, "a\u{fffd}b\u{fffd}c\u{fffd}\t");
    }

    #[test]
    fn actions_without_a_result_are_listed_actions() {
        for action in NO_RESULT {
            assert!(crate::ACTIONS.contains(action), "{action}");
        }
    }

    #[test]
    fn lists_maps_and_nested_values_render_as_aws_writes_them() {
        let result = json!({
            "Messages": [{
                "Body": "a<b>&\r\n",
                "Attributes": {"SentTimestamp": "1"},
                "MessageAttributes": {"k": {"DataType": "String", "StringValue": "v"}}
            }]
        });
        let xml = xml_response("ReceiveMessage", &result, "rid");
        assert!(xml.contains(
            "<ReceiveMessageResponse xmlns=\"http://queue.amazonaws.com/doc/2012-11-05/\">"
        ));
        assert!(xml.contains("<Message><Attribute><Name>SentTimestamp</Name><Value>1</Value></Attribute><Body>a&lt;b&gt;&amp;&#xD;\n</Body>"));
        assert!(xml.contains("<MessageAttribute><Name>k</Name><Value><DataType>String</DataType><StringValue>v</StringValue></Value></MessageAttribute>"));
        assert!(xml.ends_with("<ResponseMetadata><RequestId>rid</RequestId></ResponseMetadata></ReceiveMessageResponse>"));
    }

    #[test]
    fn a_receive_that_found_nothing_answers_the_bare_result_element() {
        for empty in [json!({}), json!({"Messages": []})] {
            let xml = xml_response("ReceiveMessage", &empty, "r");
            assert!(
                xml.contains("<ReceiveMessageResult/><ResponseMetadata>"),
                "{xml}"
            );
        }
    }

    #[test]
    fn an_empty_result_has_only_response_metadata() {
        let xml = xml_response("DeleteQueue", &json!({}), "r");
        assert!(!xml.contains("DeleteQueueResult"));
    }
}
