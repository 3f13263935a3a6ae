//! What every batch action shares: AWS's checks of the batch's shape, entries that fail
//! their own checks failing alone, and the answer's `Successful` and `Failed` lists.

use std::collections::HashSet;

use leasehold_backend::Backend;
use leasehold_engine::EngineError;

use super::{checked, Context};
use crate::error::{wire_code, ProtocolError, Result};
use crate::shapes::{BatchOutput, BatchResultErrorEntry, HandleEntry, MessageEntry};

/// The most entries a batch request may carry.
const MAX_BATCH_ENTRIES: usize = 10;

/// An entry of a batch request.
pub(super) trait Entry {
    fn id(&self) -> Option<&str>;
}

impl Entry for MessageEntry {
    fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }
}

impl Entry for HandleEntry {
    fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }
}

/// A batch request's queue and entries, the batch's shape checked as AWS does.
pub(super) async fn open<E: Entry>(
    backend: &dyn Backend,
    ctx: &Context,
    queue_url: Option<String>,
    entries: Option<Vec<E>>,
    entry_name: &'static str,
) -> Result<(String, Vec<E>)> {
    let queue = ctx.queue(backend, queue_url)?;
    let entries = entries.unwrap_or_default();
    let ids = check_ids(entries.iter().map(Entry::id), entry_name);
    checked(backend, &queue, ids).await?;
    Ok((queue, entries))
}

/// Checks a batch's shape as AWS does, before any entry runs.
fn check_ids<'a>(
    ids: impl ExactSizeIterator<Item = Option<&'a str>>,
    entry_name: &'static str,
) -> Result<()> {
    if ids.len() == 0 {
        return Err(ProtocolError::EmptyBatchRequest(entry_name));
    }
    if ids.len() > MAX_BATCH_ENTRIES {
        return Err(ProtocolError::TooManyEntriesInBatchRequest(ids.len()));
    }
    let mut seen = HashSet::new();
    for id in ids {
        let id = id.ok_or(ProtocolError::MissingParameter("Id"))?;
        let valid = !id.is_empty()
            && id.len() <= 80
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid {
            return Err(ProtocolError::InvalidBatchEntryId);
        }
        if !seen.insert(id) {
            return Err(ProtocolError::BatchEntryIdsNotDistinct(id.to_string()));
        }
    }
    Ok(())
}

/// A batch's entries in order, each with the error of its own checks if they failed.
pub(super) struct Outline(Vec<(String, Option<ProtocolError>)>);

/// Runs each entry's own checks: what passed goes to the backend (in order), what failed is
/// kept in the outline to fail alone.
pub(super) fn sort<E: Entry, T>(
    entries: Vec<E>,
    mut check: impl FnMut(E) -> Result<T>,
) -> (Vec<T>, Outline) {
    let mut passed = Vec::new();
    let outline = entries
        .into_iter()
        .map(|entry| {
            // `open` made sure every entry has an id.
            let id = entry.id().unwrap_or_default().to_string();
            match check(entry) {
                Ok(value) => {
                    passed.push(value);
                    (id, None)
                }
                Err(error) => (id, Some(error)),
            }
        })
        .collect();
    (passed, Outline(outline))
}

impl Outline {
    /// The batch's answer: `results` holds the backend's outcome for each entry that passed,
    /// in order; `success` shapes one that succeeded.
    pub(super) fn answer<S, O>(
        self,
        results: impl IntoIterator<Item = Result<S, EngineError>>,
        mut success: impl FnMut(String, S) -> O,
    ) -> BatchOutput<O> {
        let mut results = results.into_iter();
        let mut out = BatchOutput {
            successful: vec![],
            failed: vec![],
        };
        for (id, own_error) in self.0 {
            let outcome = match own_error {
                Some(error) => Err(error),
                None => results
                    .next()
                    .map_or_else(|| Err(missing_result()), |r| r.map_err(ProtocolError::from)),
            };
            match outcome {
                Ok(value) => out.successful.push(success(id, value)),
                Err(error) => out.failed.push(failure(&id, &error)),
            }
        }
        out
    }
}

/// The one result of a single-entry command.
pub(super) fn only<S>(results: Vec<Result<S, EngineError>>) -> Result<S> {
    results
        .into_iter()
        .next()
        .map_or_else(|| Err(missing_result()), |r| r.map_err(ProtocolError::from))
}

/// A backend answered fewer results than it was given entries: its fault, not the client's.
fn missing_result() -> ProtocolError {
    ProtocolError::Internal("the backend answered no result for an entry".into())
}

fn failure(id: &str, error: &ProtocolError) -> BatchResultErrorEntry {
    let code = wire_code(error);
    BatchResultErrorEntry {
        id: id.to_string(),
        sender_fault: code.sender_fault,
        code: code.query_code.to_string(),
        message: error.to_string(),
    }
}
