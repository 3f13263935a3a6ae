//! A batch of key-value writes, applied in order and atomically by a store.

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    /// Deletes every key in `[start, end)`.
    DeleteRange(Vec<u8>, Vec<u8>),
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteBatch {
    pub ops: Vec<Op>,
}

impl WriteBatch {
    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.ops.push(Op::Put(key, value));
    }

    pub fn delete(&mut self, key: Vec<u8>) {
        self.ops.push(Op::Delete(key));
    }

    pub fn delete_range(&mut self, start: Vec<u8>, end: Vec<u8>) {
        self.ops.push(Op::DeleteRange(start, end));
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}
