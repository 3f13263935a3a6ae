//! Who is asking: with credentials configured, every SQS request must carry a valid SigV4
//! signature (`sigv4`) by a known access key (`credentials`), and is then its account's;
//! the admin routes want the admin token. Without credentials every request is the server's
//! own account's, as before, which `leasehold serve` allows on loopback only.

mod credentials;
pub mod sigv4;

use std::time::SystemTime;

use axum::http::HeaderMap;
use leasehold_protocol::ProtocolError;
use subtle::ConstantTimeEq;

pub use credentials::{Credential, Credentials, CredentialsError};
pub use sigv4::Arrived;

/// The service name SQS requests are signed for.
const SERVICE: &str = "sqs";

/// A request whose signature was checked: its account, and whether it was a presigned URL
/// (its signature in the query) rather than a signed header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    pub account: String,
    pub presigned: bool,
}

/// How requests are authenticated; `None` in `ServerConfig` is an open server.
#[derive(Clone, Debug, Default)]
pub struct Auth {
    pub credentials: Credentials,
    /// The bearer token the admin and observability routes want; None: those routes are
    /// served only on the separate admin listener.
    pub admin_token: Option<String>,
}

impl Auth {
    /// Who signed the request, and how, or AWS's error for why not.
    pub fn authenticate(
        &self,
        arrived: &Arrived<'_>,
        now: SystemTime,
    ) -> Result<Verified, ProtocolError> {
        let (claim, credential) = self.claimed(arrived)?;
        sigv4::verify(arrived, &claim, &credential.secret_access_key, SERVICE, now)?;
        sigv4::check_bound(arrived, &claim)?;
        Ok(Verified {
            account: credential.account_id.clone(),
            presigned: claim.expires.is_some(),
        })
    }

    /// What can be checked from the request's head alone, before it takes a work slot or has
    /// its body read: a signature is there, by a known key, dated within the allowed skew
    /// (or an unexpired presigned URL). A stranger's request costs no slot and no read.
    pub fn check_head(&self, arrived: &Arrived<'_>, now: SystemTime) -> Result<(), ProtocolError> {
        let (claim, _) = self.claimed(arrived)?;
        sigv4::check_time(&claim, now)?;
        sigv4::check_bound_head(arrived, &claim)
    }

    /// The request's claim and the known credential it names.
    fn claimed(&self, arrived: &Arrived<'_>) -> Result<(sigv4::Claim, &Credential), ProtocolError> {
        let claim = sigv4::claim(arrived)?;
        let credential = self
            .credentials
            .get(&claim.access_key_id)
            .ok_or(ProtocolError::InvalidClientTokenId)?;
        // Temporary credentials come from AWS STS, which issues none for this server.
        if arrived.headers.contains_key("x-amz-security-token")
            || arrived.path_and_query.contains("X-Amz-Security-Token=")
        {
            return Err(ProtocolError::InvalidClientTokenId);
        }
        Ok((claim, credential))
    }

    /// Whether the request carries the admin token as `Authorization: Bearer TOKEN`.
    pub fn is_admin(&self, headers: &HeaderMap) -> bool {
        let Some(token) = &self.admin_token else {
            return false;
        };
        headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|given| bool::from(given.as_bytes().ct_eq(token.as_bytes())))
    }
}
