//! Conversions between wire shapes and engine types: numbers, queue URLs, message attributes.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use leasehold_engine::{AttributeData, Engine, EngineError, MessageAttribute, MessageAttributes};

use crate::error::{ProtocolError, Result};
use crate::shapes::{MessageAttributeValue, WireAttributes};

/// A non-negative integer parameter that fits in u32, else AWS's range error.
pub fn to_u32(value: i64, param: &str, reason: &str) -> Result<u32> {
    u32::try_from(value).map_err(|_| EngineError::out_of_range(param, value, reason).into())
}

/// The queue a QueueUrl names. Accepts `http://host/ACCOUNT/NAME` or a bare name; a URL of
/// another account names no queue here.
pub fn queue_name(engine: &Engine, url: &str) -> Result<String> {
    let path = url
        .split_once("://")
        .map_or(url, |(_, rest)| rest.split_once('/').map_or("", |(_, p)| p));
    let path = path.split(['?', '#']).next().unwrap_or("");
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let name = match segments.as_slice() {
        [name] => *name,
        [account, name] if *account == engine.config().account_id => *name,
        _ if !url.contains('/') => url,
        _ => return Err(EngineError::QueueDoesNotExist.into()),
    };
    engine.queue_exists(name)?;
    Ok(name.to_string())
}

/// `http://HOST/ACCOUNT/NAME`, the host being the one the client addressed.
pub fn queue_url(engine: &Engine, host: &str, name: &str) -> String {
    format!("http://{host}/{}/{name}", engine.config().account_id)
}

/// Wire attributes to engine attributes; binary values arrive base64-encoded.
pub fn from_wire(attributes: &WireAttributes) -> Result<MessageAttributes> {
    attributes
        .iter()
        .map(|(name, value)| {
            let data_type = value.data_type.clone().unwrap_or_default();
            let data = if data_type.starts_with("Binary") {
                let encoded = value.binary_value.as_deref().unwrap_or("");
                AttributeData::Binary(STANDARD.decode(encoded).map_err(|_| {
                    ProtocolError::InvalidParameterValue(format!(
                        "The message attribute '{name}' has an invalid binary value: not base64."
                    ))
                })?)
            } else {
                AttributeData::Text(value.string_value.clone().unwrap_or_default())
            };
            Ok((name.clone(), MessageAttribute { data_type, data }))
        })
        .collect()
}

pub fn to_wire(attribute: &MessageAttribute) -> MessageAttributeValue {
    let (string_value, binary_value) = match &attribute.data {
        AttributeData::Text(text) => (Some(text.clone()), None),
        AttributeData::Binary(bytes) => (None, Some(STANDARD.encode(bytes))),
    };
    MessageAttributeValue {
        string_value,
        binary_value,
        data_type: Some(attribute.data_type.clone()),
        ..MessageAttributeValue::default()
    }
}

/// Whether a message attribute name is selected by ReceiveMessage's MessageAttributeNames.
pub fn attribute_selected(selectors: &[String], name: &str) -> bool {
    selectors.iter().any(|s| {
        s == "All"
            || s == "*"
            || s == ".*"
            || s == name
            || s.strip_suffix(".*").is_some_and(|prefix| {
                name.starts_with(prefix) && name[prefix.len()..].starts_with('.')
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_selectors_match_all_exact_and_prefix() {
        let sel = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(attribute_selected(&sel(&["All"]), "a"));
        assert!(attribute_selected(&sel(&[".*"]), "a"));
        assert!(attribute_selected(&sel(&["bar.*"]), "bar.baz"));
        assert!(!attribute_selected(&sel(&["bar.*"]), "barbaz"));
        assert!(attribute_selected(&sel(&["a"]), "a"));
        assert!(!attribute_selected(&sel(&["a"]), "ab"));
        assert!(!attribute_selected(&[], "a"));
    }
}
