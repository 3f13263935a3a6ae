//! Step two: each action applied on a [`Backend`], one function per action returning its
//! typed output. Everything that is the same for every backend happens here, once: required
//! members, number ranges, batch shapes, conversions from the wire, checksums, which
//! attributes a receive asked for, and the answer's shape. The functions are split by area
//! as the engine's operations are (`queues`, `messages`, `receive`, `dead_letters`); the
//! dispatch from a `Request` is generated from the one list of actions in `request.rs`.

pub(crate) mod access;
pub(crate) mod batch;
pub(crate) mod dead_letters;
pub(crate) mod messages;
pub(crate) mod queues;
pub(crate) mod receive;

use leasehold_backend::Backend;
use serde::Serialize;

use crate::convert::{queue_key, queue_url};
use crate::error::Result;
use crate::shapes::required;
use crate::wire::Answer;

pub use receive::{Attempt, Receive};

/// What the request needs to know about how it arrived.
#[derive(Debug, Clone)]
pub struct Context {
    /// The `Host` the client addressed.
    pub host: String,
    /// What queue URLs start with: the server's public URL, else `http://HOST` (or https).
    pub origin: String,
    /// The region the request was made in (its SigV4 credential scope, else its host); None
    /// for the backend's own.
    pub region: Option<String>,
    /// The account of the credential that signed the request; None for the backend's own
    /// (every request when the server checks no signatures).
    pub account: Option<String>,
}

impl Context {
    /// The key of the queue a QueueUrl names, for this request.
    fn queue(&self, backend: &dyn Backend, url: Option<String>) -> Result<String> {
        let url = required(url, "QueueUrl")?;
        queue_key(
            backend.naming(),
            self.account.as_deref(),
            self.region.as_deref(),
            &url,
        )
    }

    /// The key of the caller's queue `name` in this request's region.
    fn queue_named(&self, backend: &dyn Backend, name: &str) -> String {
        backend
            .naming()
            .queue_key_in(self.account.as_deref(), self.region.as_deref(), name)
    }

    /// The caller's account id.
    pub fn account<'a>(&'a self, backend: &'a dyn Backend) -> &'a str {
        self.account
            .as_deref()
            .unwrap_or(&backend.naming().account_id)
    }

    /// The URL of the queue with this key, on the host the client addressed.
    fn url(&self, backend: &dyn Backend, key: &str) -> String {
        queue_url(backend.naming(), &self.origin, key)
    }
}

/// An action's own checks of its members, reported as AWS does: a queue that does not exist
/// is reported before anything wrong with the rest of the request. Only a request that fails
/// its checks costs the extra look at the backend.
async fn checked<T>(backend: &dyn Backend, queue: &str, checks: Result<T>) -> Result<T> {
    if checks.is_err() {
        backend.queue_exists(queue).await?;
    }
    checks
}

/// What applying a request gives: an answer, or a receive for the server to attempt and,
/// when it finds nothing, to wait on.
pub enum Step {
    Answer(Answer),
    Receive(Receive),
}

/// An action's typed output as the step it ends with.
pub trait IntoStep {
    fn into_step(self) -> Step;
}

/// Every typed output but a receive's is an answer, kept typed until its wire writes it.
impl<T: Serialize + Send + 'static> IntoStep for T {
    fn into_step(self) -> Step {
        Step::Answer(Answer::Typed(Box::new(self)))
    }
}

impl IntoStep for Receive {
    fn into_step(self) -> Step {
        Step::Receive(self)
    }
}
