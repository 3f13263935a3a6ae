//! AWS Signature Version 4, checked the way AWS checks it: the signature is computed again with
//! the AWS SDK's own signer (`aws-sigv4`) over exactly the headers the client says it signed,
//! the body's hash taken from the body that arrived, and compared in constant time. Header
//! signatures (`Authorization: AWS4-HMAC-SHA256 …`) and presigned query URLs (`X-Amz-*`).

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials as AwsCredentials;
use aws_sigv4::http_request::{
    sign, SignableBody, SignableRequest, SignatureLocation, SigningSettings,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use axum::http::HeaderMap;
use leasehold_protocol::ProtocolError;
use subtle::ConstantTimeEq;

const ALGORITHM: &str = "AWS4-HMAC-SHA256";
/// How far a header signature's time may be from the server's, either way.
const MAX_SKEW: Duration = Duration::from_secs(15 * 60);
/// The longest a presigned URL may be valid for: seven days.
const MAX_EXPIRES_S: u64 = 604_800;
/// The query parameters of a presigned URL that are not part of the request itself.
const PRESIGN_PARAMS: [&str; 6] = [
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Date",
    "X-Amz-Expires",
    "X-Amz-SignedHeaders",
    "X-Amz-Signature",
];

/// What arrived: the request line, the headers and the whole body.
pub struct Arrived<'a> {
    pub method: &'a str,
    /// The path and query as sent, still percent-encoded.
    pub path_and_query: &'a str,
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
}

/// A request's claim: who signed it, for which scope and time, over which headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub access_key_id: String,
    pub date: String,
    pub region: String,
    pub service: String,
    pub time: SystemTime,
    /// `X-Amz-Date` as sent.
    pub time_text: String,
    pub signed_headers: Vec<String>,
    pub signature: String,
    /// A presigned URL's lifetime; None for a header signature.
    pub expires: Option<Duration>,
}

type Result<T> = std::result::Result<T, ProtocolError>;

fn incomplete(why: impl Into<String>) -> ProtocolError {
    ProtocolError::IncompleteSignature(why.into())
}

fn mismatch(why: impl Into<String>) -> ProtocolError {
    ProtocolError::SignatureDoesNotMatch(why.into())
}

const MISMATCH: &str = "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.";

/// Reads the claim from the `Authorization` header or a presigned URL's query, or answers
/// why it cannot: no signature at all, or one missing a part.
pub fn claim(arrived: &Arrived<'_>) -> Result<Claim> {
    let authorization = arrived
        .headers
        .get(axum::http::header::AUTHORIZATION)
        .map(|v| {
            v.to_str()
                .map_err(|_| incomplete("The Authorization header is not text."))
        })
        .transpose()?;
    if let Some(authorization) = authorization {
        return header_claim(authorization, arrived.headers);
    }
    // Only a request without the header has its query read for a presigned signature.
    let query = arrived
        .path_and_query
        .split_once('?')
        .map_or("", |(_, q)| q);
    let params = Params(
        form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect(),
    );
    if params.get("X-Amz-Signature").is_some() || params.get("X-Amz-Credential").is_some() {
        return query_claim(&params);
    }
    Err(ProtocolError::MissingAuthenticationToken)
}

fn header_claim(authorization: &str, headers: &HeaderMap) -> Result<Claim> {
    let Some(fields) = authorization.strip_prefix(ALGORITHM) else {
        let algorithm = authorization.split(' ').next().unwrap_or_default();
        return Err(incomplete(format!(
            "Unsupported AWS 'algorithm': '{algorithm}'. Only {ALGORITHM} is accepted."
        )));
    };
    let mut credential = None;
    let mut signed_headers = None;
    let mut signature = None;
    for field in fields.split(',').map(str::trim).filter(|f| !f.is_empty()) {
        match field.split_once('=') {
            Some(("Credential", v)) => credential = Some(v),
            Some(("SignedHeaders", v)) => signed_headers = Some(v),
            Some(("Signature", v)) => signature = Some(v),
            _ => {
                return Err(incomplete(format!(
                    "'{field}' is not a valid key=value pair in the Authorization header."
                )))
            }
        }
    }
    let missing: Vec<String> = [
        ("Credential", credential),
        ("Signature", signature),
        ("SignedHeaders", signed_headers),
    ]
    .iter()
    .filter(|(_, v)| v.is_none())
    .map(|(name, _)| format!("Authorization header requires '{name}' parameter."))
    .collect();
    let date_header = headers.get("x-amz-date").and_then(|v| v.to_str().ok());
    let mut problems = missing;
    if date_header.is_none() {
        problems.push("Authorization header requires existence of a 'X-Amz-Date' header.".into());
    }
    if !problems.is_empty() {
        return Err(incomplete(format!(
            "{} Authorization={authorization}",
            problems.join(" ")
        )));
    }
    build_claim(
        credential.unwrap_or_default(),
        signed_headers.unwrap_or_default(),
        signature.unwrap_or_default(),
        date_header.unwrap_or_default(),
        None,
    )
}

/// A query string's parameters, decoded.
struct Params(Vec<(String, String)>);

impl Params {
    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

fn query_claim(params: &Params) -> Result<Claim> {
    let missing: Vec<&str> = PRESIGN_PARAMS
        .iter()
        .copied()
        .filter(|name| params.get(name).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(incomplete(format!(
            "AWS query-string parameters missing: {}.",
            missing.join(", ")
        )));
    }
    let value = |name: &str| params.get(name).unwrap_or_default().to_string();
    if value("X-Amz-Algorithm") != ALGORITHM {
        return Err(incomplete(format!(
            "Unsupported AWS 'algorithm': '{}'.",
            value("X-Amz-Algorithm")
        )));
    }
    let expires = value("X-Amz-Expires")
        .parse::<u64>()
        .ok()
        .filter(|s| (1..=MAX_EXPIRES_S).contains(s))
        .ok_or_else(|| {
            incomplete(format!(
                "X-Amz-Expires must be a whole number of seconds from 1 to {MAX_EXPIRES_S}."
            ))
        })?;
    build_claim(
        &value("X-Amz-Credential"),
        &value("X-Amz-SignedHeaders"),
        &value("X-Amz-Signature"),
        &value("X-Amz-Date"),
        Some(Duration::from_secs(expires)),
    )
}

fn build_claim(
    credential: &str,
    signed_headers: &str,
    signature: &str,
    time_text: &str,
    expires: Option<Duration>,
) -> Result<Claim> {
    let parts: Vec<&str> = credential.split('/').collect();
    let [access_key_id, date, region, service, "aws4_request"] = parts.as_slice() else {
        return Err(incomplete(format!(
            "Credential must have the form ACCESS_KEY_ID/YYYYMMDD/REGION/SERVICE/aws4_request, not '{credential}'."
        )));
    };
    let time = parse_time(time_text).ok_or_else(|| {
        incomplete(format!(
            "X-Amz-Date must be in the form YYYYMMDD'T'HHMMSS'Z', not '{time_text}'."
        ))
    })?;
    Ok(Claim {
        access_key_id: access_key_id.to_string(),
        date: date.to_string(),
        region: region.to_string(),
        service: service.to_string(),
        time,
        time_text: time_text.to_string(),
        signed_headers: signed_headers.split(';').map(str::to_string).collect(),
        signature: signature.to_string(),
        expires,
    })
}

/// SigV4's time form, `20150830T123600Z`, read and written.
const X_AMZ_DATE: &[time::format_description::BorrowedFormatItem<'static>] =
    time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");

/// `20150830T123600Z` as a point in time.
fn parse_time(text: &str) -> Option<SystemTime> {
    let at = time::PrimitiveDateTime::parse(text, X_AMZ_DATE)
        .ok()?
        .assume_utc();
    let seconds = u64::try_from(at.unix_timestamp()).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(seconds))
}

/// Checks the claim's scope and time against `now` and the service, then the signature with
/// `secret`. The order is AWS's: scope, time, signature.
pub fn verify(
    arrived: &Arrived<'_>,
    claim: &Claim,
    secret: &str,
    service: &str,
    now: SystemTime,
) -> Result<()> {
    if claim.service != service {
        return Err(mismatch(format!(
            "Credential should be scoped to correct service: '{service}'."
        )));
    }
    if !claim.time_text.starts_with(&claim.date) {
        return Err(mismatch(format!(
            "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '{}' != '{}', from '{}'.",
            claim.date,
            claim.time_text.get(..8).unwrap_or_default(),
            claim.time_text
        )));
    }
    check_time(claim, now)?;
    if !claim.signed_headers.iter().any(|h| h == "host") {
        return Err(mismatch(
            "'Host' must be a 'SignedHeader' in the AWS Authorization.",
        ));
    }
    let bodies = match claim.expires {
        // A presigned URL's signer cannot know the body: AWS's convention is UNSIGNED-PAYLOAD,
        // some signers hash the (empty) body instead.
        Some(_) => vec![
            SignableBody::UnsignedPayload,
            SignableBody::Bytes(arrived.body),
        ],
        None => vec![SignableBody::Bytes(arrived.body)],
    };
    for body in bodies {
        let expected = expected_signature(arrived, claim, secret, body)?;
        if bool::from(expected.as_bytes().ct_eq(claim.signature.as_bytes())) {
            return Ok(());
        }
    }
    Err(mismatch(MISMATCH))
}

/// Headers AWS's SDKs leave out of a presigned URL's signature on purpose; they change nothing.
const UNSIGNED_ALLOWED: [&str; 2] = ["x-amz-user-agent", "x-amz-checksum-mode"];

/// What is executed must be what was signed, as SQS wants it (a rule of the service on top of
/// SigV4, which `verify` checks alone): every `x-amz-*` header sent (the action's
/// `X-Amz-Target` above all) is among the signed ones, and a presigned URL carries its whole
/// request in its signed query, so no body is taken with it (its signature does not cover one).
pub fn check_bound(arrived: &Arrived<'_>, claim: &Claim) -> Result<()> {
    check_bound_head(arrived, claim)?;
    if claim.expires.is_some() && !arrived.body.is_empty() {
        return Err(presigned_with_a_body());
    }
    Ok(())
}

fn presigned_with_a_body() -> ProtocolError {
    ProtocolError::AccessDenied(
        "A presigned URL carries its whole request in its signed query; a request body is not accepted with it.".into(),
    )
}

/// The part of `check_bound` the head alone can tell: one way of signing, not two; every
/// `x-amz-*` header signed; and a presigned URL that announces no body.
pub fn check_bound_head(arrived: &Arrived<'_>, claim: &Claim) -> Result<()> {
    let header = |name: &str| arrived.headers.contains_key(name);
    let query = arrived
        .path_and_query
        .split_once('?')
        .map_or("", |(_, q)| q);
    let presign_params = form_urlencoded::parse(query.as_bytes())
        .any(|(name, _)| name == "X-Amz-Signature" || name == "X-Amz-Credential");
    if header("authorization") && presign_params {
        return Err(ProtocolError::InvalidParameterValue(
            "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter or the Authorization header should be specified".into(),
        ));
    }
    let signed = |name: &str| {
        claim
            .signed_headers
            .iter()
            .any(|h| h.eq_ignore_ascii_case(name))
    };
    let mut unsigned: Vec<&str> = arrived
        .headers
        .keys()
        .map(|name| name.as_str())
        .filter(|name| name.starts_with("x-amz-") && !UNSIGNED_ALLOWED.contains(name))
        .filter(|name| !signed(name))
        .collect();
    unsigned.dedup();
    if !unsigned.is_empty() {
        return Err(ProtocolError::AccessDenied(format!(
            "There were headers present in the request which were not signed: {}",
            unsigned.join(", ")
        )));
    }
    let announces_a_body = header("transfer-encoding")
        || arrived
            .headers
            .get("content-length")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|n| n.trim() != "0");
    if claim.expires.is_some() && announces_a_body {
        return Err(presigned_with_a_body());
    }
    Ok(())
}

pub(crate) fn check_time(claim: &Claim, now: SystemTime) -> Result<()> {
    let stamp = |t: SystemTime| {
        let s = t
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        time::OffsetDateTime::from_unix_timestamp(s).map_or_else(
            |_| "?".to_string(),
            |t| t.format(X_AMZ_DATE).unwrap_or_default(),
        )
    };
    if let Some(expires) = claim.expires {
        if now > claim.time + expires {
            return Err(ProtocolError::RequestExpired("Request has expired".into()));
        }
        if claim.time > now + MAX_SKEW {
            return Err(ProtocolError::RequestExpired(format!(
                "Request is not yet valid: {} is later than {} (+15 min.)",
                claim.time_text,
                stamp(now)
            )));
        }
        return Ok(());
    }
    if claim.time + MAX_SKEW < now {
        return Err(ProtocolError::RequestExpired(format!(
            "Signature expired: {} is now earlier than {} ({} - 15 min.)",
            claim.time_text,
            stamp(now.checked_sub(MAX_SKEW).unwrap_or(SystemTime::UNIX_EPOCH)),
            stamp(now)
        )));
    }
    if claim.time > now + MAX_SKEW {
        return Err(ProtocolError::RequestExpired(format!(
            "Signature not yet current: {} is still later than {} ({} + 15 min.)",
            claim.time_text,
            stamp(now + MAX_SKEW),
            stamp(now)
        )));
    }
    Ok(())
}

/// The signature of the request as the claim describes it, by the AWS SDK's signer.
fn expected_signature(
    arrived: &Arrived<'_>,
    claim: &Claim,
    secret: &str,
    body: SignableBody<'_>,
) -> Result<String> {
    let identity: Identity =
        AwsCredentials::new(&claim.access_key_id, secret, None, None, "leasehold").into();
    let mut settings = SigningSettings::default();
    // Exactly the headers the client signed, whatever they are.
    settings.excluded_headers = None;
    if let Some(expires) = claim.expires {
        settings.signature_location = SignatureLocation::QueryParams;
        settings.expires_in = Some(expires);
    }
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(&claim.region)
        .name(&claim.service)
        .time(claim.time)
        .settings(settings)
        .build()
        .map_err(|e| mismatch(e.to_string()))?
        .into();
    let host = arrived
        .headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let uri = format!("http://{host}{}", without_signature(arrived.path_and_query));
    let mut headers = Vec::new();
    for name in &claim.signed_headers {
        // The signer adds x-amz-date itself, from the claim's time.
        if name == "x-amz-date" && claim.expires.is_none() {
            continue;
        }
        let values = arrived.headers.get_all(name.as_str());
        let mut any = false;
        for value in values {
            let value = value
                .to_str()
                .map_err(|_| mismatch(format!("The signed header {name} is not text.")))?;
            headers.push((name.as_str(), value));
            any = true;
        }
        if !any {
            return Err(mismatch(format!(
                "The header {name} is named in SignedHeaders but was not sent."
            )));
        }
    }
    let request = SignableRequest::new(arrived.method, uri, headers.into_iter(), body)
        .map_err(|e| mismatch(format!("The request cannot be signed: {e}")))?;
    let (_, signature) = sign(request, &params)
        .map_err(|e| mismatch(format!("The request cannot be signed: {e}")))?
        .into_parts();
    Ok(signature)
}

/// The path and query without a presigned URL's own parameters, which the signer adds back.
fn without_signature(path_and_query: &str) -> String {
    let Some((path, query)) = path_and_query.split_once('?') else {
        return path_and_query.to_string();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            let name = pair.split('=').next().unwrap_or_default();
            !PRESIGN_PARAMS.contains(&name)
        })
        .collect();
    if kept.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", kept.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x_amz_date_reads_as_utc() {
        let t = parse_time("20150830T123600Z").expect("parses");
        assert_eq!(
            t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs(),
            1_440_938_160
        );
        assert!(parse_time("2015-08-30T12:36:00Z").is_none());
    }

    #[test]
    fn a_presigned_urls_own_parameters_are_taken_out_before_signing_again() {
        assert_eq!(
            without_signature("/q?Action=SendMessage&X-Amz-Signature=ab&X-Amz-Date=1&b=2"),
            "/q?Action=SendMessage&b=2"
        );
        assert_eq!(without_signature("/?X-Amz-Signature=ab"), "/");
    }
}
