//! Conversions between wire shapes and engine types: numbers, queue URLs, message attributes.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use leasehold_engine::{
    is_account_id, is_region, AttributeData, EngineError, MessageAttribute, MessageAttributes,
    Naming,
};

use crate::error::{ProtocolError, Result};
use crate::shapes::{MessageAttributeValue, WireAttributes};

/// A non-negative integer parameter that fits in u32, else AWS's range error.
pub fn to_u32(value: i64, param: &str, reason: &str) -> Result<u32> {
    u32::try_from(value).map_err(|_| EngineError::out_of_range(param, value, reason).into())
}

/// An optional member held to u32 as [`to_u32`] does.
pub fn optional_u32(value: Option<i64>, param: &str, reason: &str) -> Result<Option<u32>> {
    value.map(|v| to_u32(v, param, reason)).transpose()
}

/// The queue a QueueUrl names, as the engine's key (see the engine's `regions.rs`):
/// - `http://HOST/ACCOUNT/NAME`: in the region the host names (`sqs.REGION.…`), else in the
///   engine's own region;
/// - `http://HOST/queue/REGION/ACCOUNT/NAME`: in that region, the form Leasehold hands out for
///   queues of other regions;
/// - a bare `NAME`: in the request's region.
///
/// A bare name is the caller's (`account`, None for the own one); a URL names its account's
/// queue, whoever asks: whether the caller may use it is `access`'s to say, whether it exists
/// the backend's.
pub fn queue_key(
    naming: &Naming,
    account: Option<&str>,
    request_region: Option<&str>,
    url: &str,
) -> Result<String> {
    let (host, path) = match url.split_once("://") {
        Some((_, rest)) => rest.split_once('/').unwrap_or((rest, "")),
        None => ("", url),
    };
    let path = path.split(['?', '#']).next().unwrap_or("");
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let key = |owner: Option<&str>, region: Option<&str>, name: &str| {
        Ok(naming.queue_key_in(owner, region, name))
    };
    // The server's own `--account-id` need not be twelve digits; any other account is.
    let an_account = |owner: &str| is_account_id(owner) || owner == naming.account_id;
    match segments.as_slice() {
        [name] if host.is_empty() => key(account, request_region, name),
        [name] => key(account, region_of_host(host), name),
        [owner, name] if an_account(owner) => key(Some(owner), region_of_host(host), name),
        ["queue", region, owner, name] if an_account(owner) => key(Some(owner), Some(region), name),
        _ => Err(EngineError::QueueDoesNotExist.into()),
    }
}

/// The region a host names the way AWS's do: `sqs.REGION.amazonaws.com`,
/// `sqs.REGION.localhost:9324`. A region has a dash (`us-east-1`), so the global
/// `sqs.amazonaws.com` names none.
pub fn region_of_host(host: &str) -> Option<&str> {
    let (region, _) = host.strip_prefix("sqs.")?.split_once('.')?;
    (is_region(region) && region.contains('-')).then_some(region)
}

/// The URL of the queue with this key under `origin` (`http://HOST` for the host the client
/// addressed, or the server's public URL): `ORIGIN/ACCOUNT/NAME` when the host already says
/// the queue's region or the queue is in the own one, else `ORIGIN/queue/REGION/ACCOUNT/NAME`.
pub fn queue_url(naming: &Naming, origin: &str, key: &str) -> String {
    let (region, name) = naming.key_parts(key);
    let account = naming.key_account(key);
    let origin = origin.trim_end_matches('/');
    let host = origin.split_once("://").map_or(origin, |(_, rest)| rest);
    let host = host.split('/').next().unwrap_or(host);
    let implied = region_of_host(host).unwrap_or(&naming.region);
    if region == implied {
        format!("{origin}/{account}/{name}")
    } else {
        format!("{origin}/queue/{region}/{account}/{name}")
    }
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

/// Whether a message attribute name is selected by ReceiveMessage's MessageAttributeNames:
/// all of them (`All`, `*`, `.*`), the name itself, or a prefix before `.*`, as AWS matches
/// it (its recorded answer: `Hel.*` selects `Hello` and `Help.Me`).
pub fn attribute_selected(selectors: &[String], name: &str) -> bool {
    selectors.iter().any(|s| {
        s == "All"
            || s == "*"
            || s == ".*"
            || s == name
            || s.strip_suffix(".*")
                .is_some_and(|prefix| name.starts_with(prefix))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_names_a_region_only_in_aws_form() {
        assert_eq!(
            region_of_host("sqs.eu-west-3.amazonaws.com"),
            Some("eu-west-3")
        );
        assert_eq!(
            region_of_host("sqs.us-west-2.localhost:9324"),
            Some("us-west-2")
        );
        assert_eq!(region_of_host("sqs.amazonaws.com"), None);
        assert_eq!(region_of_host("127.0.0.1:9324"), None);
        assert_eq!(region_of_host("sqs.localhost:9324"), None);
    }

    #[test]
    fn a_url_names_its_accounts_queue_and_a_bare_name_the_callers() {
        let naming = Naming {
            region: "us-east-1".into(),
            account_id: "local".into(),
        };
        let key = |account: Option<&str>, url: &str| queue_key(&naming, account, None, url);
        // The server's own account id, twelve digits or not.
        assert_eq!(key(None, "http://h/local/q").unwrap(), "q");
        assert_eq!(
            key(None, "http://h/111111111111/q").unwrap(),
            "111111111111:q"
        );
        assert_eq!(key(Some("222222222222"), "q").unwrap(), "222222222222:q");
        assert_eq!(
            key(None, "http://h/queue/eu-west-1/111111111111/q").unwrap(),
            "111111111111:eu-west-1/q"
        );
        assert!(key(None, "http://h/not-an-account/q").is_err());
        assert_eq!(
            queue_url(&naming, "https://sqs.example.com/", "111111111111:q"),
            "https://sqs.example.com/111111111111/q"
        );
    }

    #[test]
    fn attribute_selectors_match_all_exact_and_prefix() {
        let sel = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(attribute_selected(&sel(&["All"]), "a"));
        assert!(attribute_selected(&sel(&[".*"]), "a"));
        assert!(attribute_selected(&sel(&["bar.*"]), "bar.baz"));
        assert!(attribute_selected(&sel(&["Hel.*"]), "Hello"));
        assert!(!attribute_selected(&sel(&["Hel.*"]), "General"));
        assert!(attribute_selected(&sel(&["a"]), "a"));
        assert!(!attribute_selected(&sel(&["a"]), "ab"));
        assert!(!attribute_selected(&[], "a"));
    }
}
