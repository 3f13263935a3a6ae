//! `leasehold work --http URL`: each message POSTed to a local web app, as AWS Elastic
//! Beanstalk's worker daemon (sqsd) does it, with the runtime around it: the lease is
//! heartbeated while the request is open, a lost lease aborts the request, the idempotency
//! gate applies, a failure retries after the backoff.
//!
//! sqsd's request: the body as the request's body (`Content-Type: application/json`, sqsd's
//! default), `X-Aws-Sqsd-Msgid`, `X-Aws-Sqsd-Queue` (the queue's name),
//! `X-Aws-Sqsd-First-Received-At` (RFC 3339, UTC), `X-Aws-Sqsd-Receive-Count`, and
//! `X-Aws-Sqsd-Attr-<name>` for each message attribute of a string or number type; and
//! Leasehold's `X-Leasehold-Idempotency-Key`. Only a `200 OK` deletes the message, as with
//! sqsd; any other answer, a refused connection or no answer within the timeout fails it.

use std::sync::Arc;
use std::time::Duration;

use leasehold_worker::idempotency::with_causes;
use leasehold_worker::{HandlerError, Message};
use reqwest::header::{HeaderName, HeaderValue};

/// Where messages are POSTed, and what each request carries besides the message.
pub(crate) struct HttpTarget {
    client: reqwest::Client,
    url: reqwest::Url,
    queue_name: String,
    timeout: Duration,
}

impl HttpTarget {
    /// At most `connections` kept open to the app (`--concurrency`: no more requests are
    /// ever open at once).
    pub fn new(
        url: reqwest::Url,
        queue_url: &str,
        connections: usize,
        timeout: Duration,
    ) -> anyhow::Result<HttpTarget> {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(connections)
            // sqsd's own, first: web frameworks recognise the daemon by it (aws-sdk-rails'
            // middleware checks that it starts with `aws-sqsd`).
            .user_agent(concat!(
                "aws-sqsd/1.1 (leasehold-work/",
                env!("CARGO_PKG_VERSION"),
                ")"
            ))
            // Only the POST's own 200 counts: a redirect followed (to a login page, as a
            // GET) must not delete a message nobody processed.
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        let queue_name = queue_url
            .rsplit('/')
            .next()
            .unwrap_or(queue_url)
            .to_string();
        Ok(HttpTarget {
            client,
            url,
            queue_name,
            timeout,
        })
    }

    /// The request sqsd would make for `m`.
    fn request(&self, m: &Message) -> reqwest::RequestBuilder {
        let mut request = (self.client.post(self.url.clone()))
            .timeout(self.timeout)
            .header("Content-Type", "application/json")
            .header("X-Aws-Sqsd-Msgid", &m.message_id)
            .header("X-Aws-Sqsd-Queue", &self.queue_name)
            .header("X-Aws-Sqsd-Receive-Count", m.receive_count.to_string())
            .header(
                "X-Leasehold-Idempotency-Key",
                leasehold_worker::idempotency_key(m),
            )
            .body(m.body.clone());
        if let Some(first) = first_received_at(m) {
            request = request.header("X-Aws-Sqsd-First-Received-At", first);
        }
        for (name, value) in &m.message_attributes {
            let Some(text) = &value.string_value else {
                continue; // a binary attribute has no header form
            };
            let header = HeaderName::from_bytes(format!("X-Aws-Sqsd-Attr-{name}").as_bytes());
            // UTF-8 as it is: a header value may hold any byte but controls.
            match (header, HeaderValue::from_bytes(text.as_bytes())) {
                (Ok(header), Ok(value)) => request = request.header(header, value),
                _ => tracing::warn!(
                    attribute = %name,
                    "a message attribute that cannot be an HTTP header is not sent"
                ),
            }
        }
        request
    }
}

/// ApproximateFirstReceiveTimestamp (milliseconds since the epoch) as sqsd writes it.
fn first_received_at(m: &Message) -> Option<String> {
    let ms: i64 = m
        .attributes
        .get("ApproximateFirstReceiveTimestamp")?
        .parse()
        .ok()?;
    let at = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok()?;
    at.format(&time::format_description::well_known::Rfc3339)
        .ok()
}

/// POSTs one message; Ok only for a 200. Dropped (the request aborted) when the run must
/// stop: the lease could end before an answer would come, or the worker stops past its grace.
pub(crate) async fn post(target: Arc<HttpTarget>, m: Message) -> Result<(), HandlerError> {
    let url = &target.url;
    tokio::select! {
        answer = target.request(&m).send() => match answer {
            Ok(response) if response.status() == reqwest::StatusCode::OK => Ok(()),
            Ok(response) => Err(format!("{url} answered {}", response.status()).into()),
            Err(error) if error.is_timeout() => Err(format!(
                "{url} did not answer within {} s",
                target.timeout.as_secs_f64()
            )
            .into()),
            Err(error) => Err(format!("{url}: {}", with_causes(&error)).into()),
        },
        _ = m.cancel.cancelled() => Err(
            "the run had to stop (lease or claim could end, or the worker stopped): request aborted"
                .into(),
        ),
    }
}
