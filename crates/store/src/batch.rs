//! A batch of key-value writes, applied in order and atomically by a store.

use std::collections::HashSet;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Put(Vec<u8>, Vec<u8>),
    /// A put of a message content whose queue asks for encryption at rest: sealed to its
    /// key by a store told `Store::seal_with` (on the committer's thread, not under the
    /// request's locks), put as it is by one that was not.
    PutSealed(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    DeleteRange(RangeDelete),
    /// Puts under `to` the value stored under `from` (a message's content moving to another
    /// queue), without the value passing through the caller.
    Copy {
        from: Vec<u8>,
        to: Vec<u8>,
    },
}

/// Deletes every key in `[start, end)` or, with `below = Some((offset, bound))`, those whose
/// bytes from `offset` compare below `bound`. Range deletes only ever remove records the
/// engine has already dropped, so a store may apply them in steps, in the background, after
/// later writes (which never fall in a range: queue ids are not reused, and sequence numbers
/// after a purge are above its bound).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeDelete {
    pub start: Vec<u8>,
    pub end: Vec<u8>,
    pub below: Option<(usize, Vec<u8>)>,
}

impl RangeDelete {
    pub fn covers(&self, key: &[u8]) -> bool {
        let in_range = key >= self.start.as_slice() && key < self.end.as_slice();
        in_range
            && self.below.as_ref().is_none_or(|(offset, bound)| {
                key.get(*offset..).is_some_and(|tail| {
                    let n = bound.len().min(tail.len());
                    &tail[..n] < bound.as_slice()
                })
            })
    }
}

impl Op {
    /// The one key a put, delete or copy writes.
    pub fn key(&self) -> Option<&[u8]> {
        match self {
            Op::Put(k, _) | Op::PutSealed(k, _) | Op::Delete(k) => Some(k),
            Op::Copy { to, .. } => Some(to),
            Op::DeleteRange(_) => None,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteBatch {
    pub ops: Vec<Op>,
}

impl WriteBatch {
    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.ops.push(Op::Put(key, value));
    }

    /// `value` under `key`, sealed where the store seals (`Op::PutSealed`).
    pub fn put_sealed(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.ops.push(Op::PutSealed(key, value));
    }

    pub fn delete(&mut self, key: Vec<u8>) {
        self.ops.push(Op::Delete(key));
    }

    pub fn copy(&mut self, from: Vec<u8>, to: Vec<u8>) {
        self.ops.push(Op::Copy { from, to });
    }

    pub fn delete_range(&mut self, range: RangeDelete) {
        self.ops.push(Op::DeleteRange(range));
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The bytes its puts, deletes and copies name: what a group commit is bounded by (a
    /// copy's value is the store's, and not counted).
    pub fn bytes(&self) -> usize {
        self.ops
            .iter()
            .map(|op| match op {
                Op::Put(k, v) | Op::PutSealed(k, v) => k.len() + v.len(),
                Op::Delete(k) => k.len(),
                Op::Copy { from, to } => from.len() + to.len(),
                Op::DeleteRange(range) => range.start.len() + range.end.len(),
            })
            .sum()
    }
}

/// The ops of a group of batches that still matter, in order: every put or delete that a
/// later put or delete of the same key overwrites is left out. Under load each request of a
/// group commit rewrites its queue's record, so a group of 32 writes it once, not 32 times.
/// Range deletes are always kept. A copy reads its source, so what was written there before
/// it is kept even when a later op overwrites the source.
pub fn effective_ops(batches: &[WriteBatch]) -> Vec<&Op> {
    let mut written_later: HashSet<&[u8]> = HashSet::new();
    let mut keep: Vec<&Op> = Vec::new();
    for op in batches.iter().rev().flat_map(|b| b.ops.iter().rev()) {
        let Some(key) = op.key() else {
            keep.push(op);
            continue;
        };
        if let Op::Copy { from, to } = op {
            // A copy from nothing writes nothing, so what was written under `to` before it
            // stays needed.
            if !written_later.contains(to.as_slice()) {
                written_later.remove(from.as_slice());
                keep.push(op);
            }
            continue;
        }
        if written_later.insert(key) {
            keep.push(op);
        }
    }
    keep.reverse();
    keep
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::memory::copy;

    fn apply<'a>(ops: impl IntoIterator<Item = &'a Op>) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut data = BTreeMap::new();
        for op in ops {
            match op {
                Op::Put(k, v) | Op::PutSealed(k, v) => {
                    data.insert(k.clone(), v.clone());
                }
                Op::Delete(k) => {
                    data.remove(k);
                }
                Op::DeleteRange(range) => data.retain(|k, _| !range.covers(k)),
                Op::Copy { from, to } => copy(&mut data, from, to, None),
            }
        }
        data
    }

    fn op() -> impl Strategy<Value = Op> {
        let key = || (0u8..6).prop_map(|k| vec![k]);
        prop_oneof![
            4 => (key(), any::<u8>()).prop_map(|(k, v)| Op::Put(k, vec![v])),
            1 => (key(), any::<u8>()).prop_map(|(k, v)| Op::PutSealed(k, vec![v])),
            2 => key().prop_map(Op::Delete),
            2 => (key(), key()).prop_map(|(from, to)| Op::Copy { from, to }),
            1 => (key(), key()).prop_map(|(a, b)| Op::DeleteRange(RangeDelete {
                start: a.clone().min(b.clone()),
                end: a.max(b),
                below: None,
            })),
        ]
    }

    #[test]
    fn a_range_delete_with_a_bound_covers_only_keys_below_it() {
        let range = RangeDelete {
            start: vec![1],
            end: vec![2],
            below: Some((1, vec![0, 5])),
        };
        assert!(range.covers(&[1, 0, 4, 9]));
        assert!(!range.covers(&[1, 0, 5, 0]));
        assert!(!range.covers(&[2, 0, 0]));
        assert!(!range.covers(&[0, 0, 0]));
    }

    proptest! {
        #[test]
        fn the_effective_ops_leave_the_same_data_as_all_of_them(
            batches in prop::collection::vec(
                prop::collection::vec(op(), 0..8).prop_map(|ops| WriteBatch { ops }),
                0..8,
            )
        ) {
            let all = apply(batches.iter().flat_map(|b| &b.ops));
            prop_assert_eq!(apply(effective_ops(&batches)), all);
        }
    }

    #[test]
    fn a_record_rewritten_by_every_request_of_a_group_is_written_once() {
        let batch = |v: u8| WriteBatch {
            ops: vec![Op::Put(b"Q1".to_vec(), vec![v]), Op::Put(vec![v], vec![v])],
        };
        let batches: Vec<WriteBatch> = (0..32).map(batch).collect();
        let ops = effective_ops(&batches);
        assert_eq!(ops.len(), 33);
        let queue_records: Vec<_> = ops.iter().filter(|op| op.key() == Some(b"Q1")).collect();
        assert_eq!(queue_records, [&&Op::Put(b"Q1".to_vec(), vec![31])]);
    }
}
