//! The codec's primitives: a writer and a bounds-checked reader of its length-prefixed
//! values.

use std::sync::Arc;

use super::VERSION;

pub(super) struct Writer(pub(super) Vec<u8>);

impl Writer {
    pub(super) fn new() -> Writer {
        Writer(vec![VERSION])
    }
    pub(super) fn raw(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
    pub(super) fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub(super) fn u32(&mut self, v: u32) {
        self.raw(&v.to_be_bytes());
    }
    pub(super) fn u64(&mut self, v: u64) {
        self.raw(&v.to_be_bytes());
    }
    pub(super) fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.raw(b);
    }
    pub(super) fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
    pub(super) fn opt<T>(&mut self, v: &Option<T>, f: impl FnOnce(&mut Writer, &T)) {
        match v {
            None => self.u8(0),
            Some(x) => {
                self.u8(1);
                f(self, x);
            }
        }
    }
    pub(super) fn list<T>(&mut self, items: &[T], mut f: impl FnMut(&mut Writer, &T)) {
        self.u32(items.len() as u32);
        for item in items {
            f(self, item);
        }
    }
}

pub(super) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or("record is truncated")?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }
    pub(super) fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        Ok(self.take(N)?.try_into().expect("took N bytes"))
    }
    pub(super) fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    pub(super) fn bool(&mut self) -> Result<bool, String> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(format!("bad boolean {b}")),
        }
    }
    pub(super) fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_be_bytes(self.array()?))
    }
    pub(super) fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_be_bytes(self.array()?))
    }
    pub(super) fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    pub(super) fn string(&mut self) -> Result<String, String> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| "text is not UTF-8".to_string())
    }
    pub(super) fn arc_str(&mut self) -> Result<Arc<str>, String> {
        std::str::from_utf8(self.bytes()?)
            .map(Arc::from)
            .map_err(|_| "text is not UTF-8".to_string())
    }
    pub(super) fn opt<T>(
        &mut self,
        f: impl FnOnce(&mut Reader<'a>) -> Result<T, String>,
    ) -> Result<Option<T>, String> {
        match self.u8()? {
            0 => Ok(None),
            1 => f(self).map(Some),
            b => Err(format!("bad option tag {b}")),
        }
    }
    pub(super) fn list<T>(
        &mut self,
        mut f: impl FnMut(&mut Reader<'a>) -> Result<T, String>,
    ) -> Result<Vec<T>, String> {
        let n = self.u32()? as usize;
        // A length larger than what is left is damage, not a reason to allocate.
        if n > self.buf.len() - self.pos {
            return Err("list length exceeds the record".into());
        }
        (0..n).map(|_| f(self)).collect()
    }
    pub(super) fn at_end(&self) -> bool {
        self.pos == self.buf.len()
    }

    pub(super) fn finish(&self) -> Result<(), String> {
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err("trailing bytes after the record".into())
        }
    }
}
