//! The region a request is made in, as AWS reads it: the SigV4 credential scope (of the
//! `Authorization` header, or `X-Amz-Credential` of a presigned URL), else the host
//! (`sqs.REGION.…`). None leaves the engine's own region.

use axum::http::{header, HeaderMap, Uri};
use leasehold_engine::is_region;
use leasehold_protocol::{form_params, region_of_host};

pub fn of_request(headers: &HeaderMap, uri: &Uri, host: &str) -> Option<String> {
    let signed = headers
        .get(header::AUTHORIZATION)
        .and_then(|a| a.to_str().ok())
        .and_then(|a| a.split_once("Credential="))
        .map(|(_, rest)| {
            rest.split([',', ' '])
                .next()
                .unwrap_or_default()
                .to_string()
        });
    let presigned = || {
        form_params(uri.query().unwrap_or_default().as_bytes())
            .into_iter()
            .find(|(name, _)| name == "X-Amz-Credential")
            .map(|(_, credential)| credential)
    };
    signed
        .or_else(presigned)
        .and_then(|credential| scope_region(&credential).map(str::to_string))
        .or_else(|| region_of_host(host).map(str::to_string))
}

/// `AKID/20261203/eu-central-1/sqs/aws4_request` → `eu-central-1`.
fn scope_region(credential: &str) -> Option<&str> {
    let region = credential.split('/').nth(2)?;
    is_region(region).then_some(region)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_credential_scope_names_the_region_before_the_host() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            "AWS4-HMAC-SHA256 Credential=test/20261203/eu-central-1/sqs/aws4_request, SignedHeaders=host, Signature=abc"
                .parse()
                .unwrap(),
        );
        let uri: Uri = "/".parse().unwrap();
        assert_eq!(
            of_request(&headers, &uri, "sqs.us-west-2.localhost").as_deref(),
            Some("eu-central-1")
        );
        let presigned: Uri = "/?X-Amz-Credential=test%2F20261203%2Fap-south-1%2Fsqs%2Faws4_request"
            .parse()
            .unwrap();
        assert_eq!(
            of_request(&HeaderMap::new(), &presigned, "localhost").as_deref(),
            Some("ap-south-1")
        );
        assert_eq!(
            of_request(&HeaderMap::new(), &uri, "sqs.us-west-2.localhost:9324").as_deref(),
            Some("us-west-2")
        );
        assert_eq!(of_request(&HeaderMap::new(), &uri, "127.0.0.1:9324"), None);
    }
}
