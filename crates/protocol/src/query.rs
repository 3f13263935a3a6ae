//! The query protocol's requests: flat form parameters (`Attribute.1.Name=...`) folded into
//! the same JSON-shaped document the JSON protocol sends, so both share one `Request`.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::error::{ProtocolError, Result};
use crate::request::Request;

/// Members that are integers on the wire; the query protocol sends them as text.
const INTEGER_MEMBERS: &[&str] = &[
    "DelaySeconds",
    "MaxNumberOfMessages",
    "VisibilityTimeout",
    "WaitTimeSeconds",
    "MaxResults",
    "MaxNumberOfMessagesPerSecond",
];

/// `Name.N` lists and the JSON member each becomes.
const LISTS: &[(&str, &str)] = &[
    ("AttributeName", "AttributeNames"),
    ("MessageAttributeName", "MessageAttributeNames"),
    ("MessageSystemAttributeName", "MessageSystemAttributeNames"),
    ("TagKey", "TagKeys"),
    ("AWSAccountId", "AWSAccountIds"),
    ("ActionName", "Actions"),
];

/// `Name.N.{key,value}` maps: the JSON member, the key field and the value field.
const MAPS: &[(&str, &str, &str, &str)] = &[
    ("Attribute", "Attributes", "Name", "Value"),
    ("Tag", "Tags", "Key", "Value"),
    ("MessageAttribute", "MessageAttributes", "Name", "Value"),
    (
        "MessageSystemAttribute",
        "MessageSystemAttributes",
        "Name",
        "Value",
    ),
];

/// The most dot-separated segments a parameter name may have. AWS's deepest names have seven
/// (`SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringListValue.1`); a deeper
/// one is refused before it is parsed, which also bounds the recursion of `to_json`.
pub const MAX_NAME_SEGMENTS: usize = 8;

const ENTRY_LISTS: &[&str] = &[
    "SendMessageBatchRequestEntry",
    "DeleteMessageBatchRequestEntry",
    "ChangeMessageVisibilityBatchRequestEntry",
];

/// A parameter tree: leaves are text, `.N.` segments become indexed children.
#[derive(Debug, Default)]
struct Node {
    text: Option<String>,
    children: BTreeMap<String, Node>,
}

impl Node {
    /// Places `value` at `path`, walking down without recursion.
    fn insert(&mut self, path: &[&str], value: String) {
        let mut node = self;
        for segment in path {
            node = node.children.entry(segment.to_string()).or_default();
        }
        node.text = Some(value);
    }

    /// Children with numeric names, in numeric order (`.1.`, `.2.`, ... `.10.`).
    fn indexed(&self) -> Vec<&Node> {
        let mut items: Vec<(u32, &Node)> = self
            .children
            .iter()
            .filter_map(|(k, v)| k.parse::<u32>().ok().map(|i| (i, v)))
            .collect();
        items.sort_by_key(|(i, _)| *i);
        items.into_iter().map(|(_, n)| n).collect()
    }

    fn text_of(&self, child: &str) -> Option<String> {
        self.children.get(child).and_then(|c| c.text.clone())
    }
}

/// Whether `name` is the JSON member of a list or map.
fn is_collection_member(name: &str) -> bool {
    name == "Entries"
        || LISTS.iter().any(|(_, m)| *m == name)
        || MAPS.iter().any(|(_, m, ..)| *m == name)
}

fn to_json(node: &Node) -> Result<Value> {
    let mut out = Map::new();
    for (name, child) in &node.children {
        if let Some((_, member)) = LISTS.iter().find(|(n, _)| n == name) {
            let items = child
                .indexed()
                .iter()
                .filter_map(|n| n.text.clone())
                .map(Value::String)
                .collect();
            out.insert(member.to_string(), Value::Array(items));
        } else if let Some((_, member, key, value)) = MAPS.iter().find(|(n, ..)| n == name) {
            let mut map = Map::new();
            for item in child.indexed() {
                let Some(k) = item.text_of(key) else { continue };
                let v = match item.children.get(*value) {
                    Some(v) if v.children.is_empty() => {
                        Value::String(v.text.clone().unwrap_or_default())
                    }
                    Some(v) => to_json(v)?,
                    None => Value::Null,
                };
                map.insert(k, v);
            }
            out.insert(member.to_string(), Value::Object(map));
        } else if ENTRY_LISTS.contains(&name.as_str()) {
            let entries = child
                .indexed()
                .into_iter()
                .map(to_json)
                .collect::<Result<Vec<_>>>()?;
            out.insert("Entries".into(), Value::Array(entries));
        } else if child.text.as_deref() == Some("") && is_collection_member(name) {
            // botocore sends an empty list or map as the bare member name: `Entries=`.
            let empty = if MAPS.iter().any(|(_, m, ..)| m == name) {
                Value::Object(Map::new())
            } else {
                Value::Array(Vec::new())
            };
            out.insert(name.clone(), empty);
        } else if let Some(text) = &child.text {
            let value = if INTEGER_MEMBERS.contains(&name.as_str()) {
                Value::from(text.trim().parse::<i64>().map_err(|_| {
                    ProtocolError::InvalidParameterValue(format!(
                        "Value {text} for parameter {name} is invalid. Reason: must be an integer."
                    ))
                })?)
            } else {
                Value::String(text.clone())
            };
            out.insert(name.clone(), value);
        } else {
            out.insert(name.clone(), to_json(child)?);
        }
    }
    Ok(Value::Object(out))
}

/// Decodes `application/x-www-form-urlencoded` text: a POST body or a URL's query string.
pub fn form_params(encoded: &[u8]) -> Vec<(String, String)> {
    form_urlencoded::parse(encoded).into_owned().collect()
}

/// A parameter name's dot-separated segments, refused when deeper than any AWS name.
fn name_segments(key: &str) -> Result<Vec<&str>> {
    let segments: Vec<&str> = key.splitn(MAX_NAME_SEGMENTS + 1, '.').collect();
    if segments.len() > MAX_NAME_SEGMENTS {
        let shown: String = key.chars().take(64).collect();
        return Err(ProtocolError::InvalidParameterValue(format!(
            "The parameter name {shown}... is invalid. Reason: it has more than {MAX_NAME_SEGMENTS} dot-separated parts."
        )));
    }
    Ok(segments)
}

/// Parses query-protocol parameters. `queue_url` is the queue the request was addressed to
/// by its path, used when the parameters name none.
pub fn parse_query(params: &[(String, String)], queue_url: Option<String>) -> Result<Request> {
    let mut root = Node::default();
    let mut action = None;
    for (key, value) in params {
        match key.as_str() {
            "Action" => action = Some(value.clone()),
            // Protocol envelope and signing parameters, not members of the request.
            "Version" | "SignatureMethod" | "SignatureVersion" | "Signature" | "Timestamp"
            | "Expires" | "AWSAccessKeyId" | "SecurityToken" => {}
            k if k.starts_with("X-Amz-") => {}
            _ => root.insert(&name_segments(key)?, value.clone()),
        }
    }
    let action = action.ok_or(ProtocolError::NoAction)?;
    // Actions about no one queue are refused at a queue's URL, as AWS does.
    if queue_url.is_some() && matches!(action.as_str(), "CreateQueue" | "ListQueues") {
        return Err(ProtocolError::ActionNotForEndpoint(action));
    }
    let mut document = to_json(&root)?;
    if let (Some(url), Value::Object(map)) = (queue_url, &mut document) {
        map.entry("QueueUrl").or_insert(Value::String(url));
    }
    Request::from_value(&action, document)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn flat_parameters_fold_into_the_json_shape() {
        let p = params(&[
            ("Attribute.2.Name", "DelaySeconds"),
            ("Attribute.2.Value", "5"),
            ("Attribute.1.Name", "VisibilityTimeout"),
            ("Attribute.1.Value", "40"),
            ("Tag.1.Key", "team"),
            ("Tag.1.Value", "a"),
            ("QueueName", "q"),
        ]);
        let mut root = Node::default();
        for (k, v) in &p {
            root.insert(&k.split('.').collect::<Vec<_>>(), v.clone());
        }
        let json = to_json(&root).unwrap();
        assert_eq!(json["Attributes"]["VisibilityTimeout"], "40");
        assert_eq!(json["Attributes"]["DelaySeconds"], "5");
        assert_eq!(json["Tags"]["team"], "a");
        assert_eq!(json["QueueName"], "q");
    }

    #[test]
    fn batch_entries_keep_their_numeric_order_and_nested_attributes() {
        let mut root = Node::default();
        for (k, v) in params(&[
            ("SendMessageBatchRequestEntry.10.Id", "ten"),
            ("SendMessageBatchRequestEntry.2.Id", "two"),
            ("SendMessageBatchRequestEntry.2.DelaySeconds", "3"),
            (
                "SendMessageBatchRequestEntry.2.MessageAttribute.1.Name",
                "k",
            ),
            (
                "SendMessageBatchRequestEntry.2.MessageAttribute.1.Value.DataType",
                "String",
            ),
            (
                "SendMessageBatchRequestEntry.2.MessageAttribute.1.Value.StringValue",
                "v",
            ),
        ]) {
            root.insert(&k.split('.').collect::<Vec<_>>(), v);
        }
        let json = to_json(&root).unwrap();
        assert_eq!(json["Entries"][0]["Id"], "two");
        assert_eq!(json["Entries"][0]["DelaySeconds"], 3);
        assert_eq!(
            json["Entries"][0]["MessageAttributes"]["k"]["StringValue"],
            "v"
        );
        assert_eq!(json["Entries"][1]["Id"], "ten");
    }

    #[test]
    fn a_parameter_name_deeper_than_any_aws_name_is_refused_without_recursing() {
        let deep = vec!["a"; 5_000].join(".");
        let err =
            parse_query(&params(&[("Action", "ListQueues"), (&deep, "1")]), None).unwrap_err();
        assert!(
            matches!(err, ProtocolError::InvalidParameterValue(_)),
            "{err:?}"
        );
        let deepest_aws_name =
            "SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringListValue.1";
        assert!(name_segments(deepest_aws_name).is_ok());
    }

    #[test]
    fn a_non_integer_for_an_integer_member_is_invalid_parameter_value() {
        let err = parse_query(
            &params(&[("Action", "ReceiveMessage"), ("MaxNumberOfMessages", "ten")]),
            None,
        )
        .unwrap_err();
        assert!(matches!(err, ProtocolError::InvalidParameterValue(_)));
    }
}
