//! The query protocol's JSON answers: what AWS sends a query request that says
//! `Accept: application/json`. The same tree as the XML answer, written as JSON: maps become
//! lists of `{Name, Value}` entries, as the XML writes them.

use serde_json::{json, Map, Value};

use crate::error::{wire_code, ProtocolError};
use crate::xml::{has_result, map_shape};

/// `{"<Action>Response": {"<Action>Result": ..., "ResponseMetadata": {"RequestId": ...}}}`.
pub fn query_json_response(action: &str, result: &Value, request_id: &str) -> Value {
    let mut response = Map::new();
    if has_result(action) {
        response.insert(format!("{action}Result"), tree(result));
    }
    response.insert(
        "ResponseMetadata".into(),
        json!({ "RequestId": request_id }),
    );
    json!({ format!("{action}Response"): response })
}

/// `{"Error": {"Type", "Code", "Message"}, "RequestId"}`: the XML error, as JSON.
pub fn query_json_error(error: &ProtocolError, request_id: &str) -> Value {
    let code = wire_code(error);
    json!({
        "Error": {
            "Type": if code.sender_fault { "Sender" } else { "Receiver" },
            "Code": code.query_code,
            "Message": error.query_message(),
        },
        "RequestId": request_id,
    })
}

fn tree(value: &Value) -> Value {
    match value {
        Value::Object(object) => Value::Object(
            object
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(member, v)| (member.clone(), member_tree(member, v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(tree).collect()),
        scalar => scalar.clone(),
    }
}

fn member_tree(member: &str, value: &Value) -> Value {
    match (value, map_shape(member)) {
        (Value::Object(map), Some((_, key))) => Value::Array(
            map.iter()
                .map(|(k, v)| json!({ key: k, "Value": tree(v) }))
                .collect(),
        ),
        _ => tree(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_become_name_value_lists_under_the_response_and_result() {
        let result = json!({"Attributes": {"QueueArn": "arn:aws:sqs:us-east-1:1:q"}});
        assert_eq!(
            query_json_response("GetQueueAttributes", &result, "r-1"),
            json!({"GetQueueAttributesResponse": {
                "GetQueueAttributesResult": {
                    "Attributes": [{"Name": "QueueArn", "Value": "arn:aws:sqs:us-east-1:1:q"}]
                },
                "ResponseMetadata": {"RequestId": "r-1"}
            }})
        );
    }

    #[test]
    fn an_action_without_a_result_has_only_the_metadata() {
        assert_eq!(
            query_json_response("DeleteQueue", &json!({}), "r-2"),
            json!({"DeleteQueueResponse": {"ResponseMetadata": {"RequestId": "r-2"}}})
        );
    }
}
