//! Message contents of the durable embedded backend: the engine keeps none, the store keeps
//! them under their messages' keys, and a receive or a peek reads back the ones it hands out,
//! through a bounded cache of recent ones, so a healthy, short queue rarely reads the disk.

use std::sync::Arc;

use leasehold_engine::{Change, Content, ContentKey, Delivery, Peeked};
use leasehold_store::{read_contents, Reader, StoreError};
use quick_cache::sync::Cache;
use quick_cache::Weighter;

/// What a cached content weighs: its bytes, plus what the cache spends on its entry.
#[derive(Clone)]
struct Bytes;

impl Weighter<ContentKey, Content> for Bytes {
    fn weight(&self, _: &ContentKey, content: &Content) -> u64 {
        content.size() as u64 + 64
    }
}

pub(crate) struct Contents {
    reader: Arc<dyn Reader>,
    /// None when the cache is switched off (`--body-cache-mb 0`).
    cache: Option<Cache<ContentKey, Content, Bytes>>,
}

/// A delivery or a peeked message: something handed out with a content to read back.
trait HandedOut {
    fn unread(&self) -> Option<ContentKey>;
    fn fill(&mut self, content: Content);
}

impl HandedOut for Delivery {
    fn unread(&self) -> Option<ContentKey> {
        self.unread
    }
    fn fill(&mut self, content: Content) {
        Delivery::fill(self, content);
    }
}

impl HandedOut for Peeked {
    fn unread(&self) -> Option<ContentKey> {
        self.unread
    }
    fn fill(&mut self, content: Content) {
        Peeked::fill(self, content);
    }
}

impl Contents {
    pub fn new(reader: Arc<dyn Reader>, cache_bytes: u64) -> Contents {
        // The cache sizes its table by a guess at how many entries fit: one per 4 KiB.
        let cache = (cache_bytes > 0).then(|| {
            let entries = usize::try_from(cache_bytes / 4096)
                .unwrap_or(usize::MAX)
                .max(16);
            Cache::with_weighter(entries, cache_bytes, Bytes)
        });
        Contents { reader, cache }
    }

    /// Keeps the cache true to a command's changes: a new content is cached (it is read soon
    /// on a healthy queue), a moved one follows its message, a deleted one goes.
    pub fn note(&self, changes: &[Change]) {
        let Some(cache) = &self.cache else { return };
        for change in changes {
            match change {
                Change::Content { at, content } => cache.insert(*at, content.clone()),
                Change::ContentMoved { from, to } => {
                    if let Some((_, content)) = cache.remove(from) {
                        cache.insert(*to, content);
                    }
                }
                Change::Message {
                    queue_id,
                    key,
                    message: None,
                } => {
                    cache.remove(&ContentKey {
                        queue_id: *queue_id,
                        key: *key,
                    });
                }
                _ => {}
            }
        }
    }

    /// Empties the cache: after the engine went back to what the store holds.
    pub fn forget_all(&self) {
        if let Some(cache) = &self.cache {
            cache.clear();
        }
    }

    /// Fills in the contents of what a receive handed out, and answers apart those whose
    /// content the store does not hold: a message deleted between the receive's commit and
    /// this read (through another receive's handle), or one whose content is lost.
    pub async fn fill_deliveries(
        &self,
        deliveries: Vec<Delivery>,
    ) -> Result<(Vec<Delivery>, Vec<Delivery>), StoreError> {
        let filled = self.fill(deliveries).await?;
        Ok(filled.into_iter().partition(|d| d.unread.is_none()))
    }

    /// Fills in the bodies of what a peek shows; one whose message is gone shows none.
    pub async fn fill_peeked(&self, peeked: Vec<Peeked>) -> Result<Vec<Peeked>, StoreError> {
        self.fill(peeked).await
    }

    async fn fill<T: HandedOut>(&self, mut items: Vec<T>) -> Result<Vec<T>, StoreError> {
        let mut missing = Vec::new();
        for (index, item) in items.iter_mut().enumerate() {
            let Some(at) = item.unread() else { continue };
            match self.cache.as_ref().and_then(|c| c.get(&at)) {
                Some(content) => item.fill(content),
                None => missing.push((index, at)),
            }
        }
        if missing.is_empty() {
            return Ok(items);
        }
        let keys: Vec<ContentKey> = missing.iter().map(|(_, at)| *at).collect();
        let reader = self.reader.clone();
        let read = crate::off_async(move || read_contents(&*reader, &keys))
            .await
            .map_err(|e| StoreError::Failed(format!("a content read stopped: {e}")))??;
        for ((index, at), content) in missing.into_iter().zip(read) {
            if let Some(content) = content {
                if let Some(cache) = &self.cache {
                    cache.insert(at, content.clone());
                }
                items[index].fill(content);
            }
        }
        Ok(items)
    }

    /// The store's reader, for what else it tells (`Reader::space`; blocking).
    pub fn reader(&self) -> Arc<dyn Reader> {
        self.reader.clone()
    }
}
