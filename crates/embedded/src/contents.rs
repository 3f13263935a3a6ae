//! Message contents of the durable embedded backend: the engine keeps none, the store keeps
//! them under their messages' keys, and a receive or a peek reads back the ones it hands out,
//! through a bounded cache of recent ones, so a healthy, short queue rarely reads the disk.

use std::collections::HashMap;
use std::sync::Arc;

use leasehold_engine::{Change, Content, ContentKey, Delivery, Peeked};
use leasehold_store::keyring::Keyring;
use leasehold_store::{read_contents, ReadContent, Reader, StoreError};
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
    /// Opens the sealed ones (a store's contents are sealed where their queue asks).
    keyring: Option<Arc<Keyring>>,
}

/// What a receive handed out, filled in: the deliveries with their contents, those whose
/// content the store does not hold, and among those the ones whose record is damaged, by
/// message id, with why.
pub(crate) struct Filled {
    pub delivered: Vec<Delivery>,
    pub unread: Vec<Delivery>,
    pub damaged: HashMap<String, String>,
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
    pub fn new(
        reader: Arc<dyn Reader>,
        cache_bytes: u64,
        keyring: Option<Arc<Keyring>>,
    ) -> Contents {
        // The cache sizes its table by a guess at how many entries fit: one per 4 KiB.
        let cache = (cache_bytes > 0).then(|| {
            let entries = usize::try_from(cache_bytes / 4096)
                .unwrap_or(usize::MAX)
                .max(16);
            Cache::with_weighter(entries, cache_bytes, Bytes)
        });
        Contents {
            reader,
            cache,
            keyring,
        }
    }

    /// Keeps the cache true to a command's changes: a new content is cached (it is read soon
    /// on a healthy queue), a moved one follows its message, a deleted one goes.
    pub fn note(&self, changes: &[Change]) {
        let Some(cache) = &self.cache else { return };
        for change in changes {
            match change {
                Change::Content { at, content, .. } => cache.insert(*at, content.clone()),
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
    /// this read (through another receive's handle), or one whose content is lost or
    /// damaged (never handed out as if it were valid).
    pub async fn fill_deliveries(&self, deliveries: Vec<Delivery>) -> Result<Filled, StoreError> {
        let (filled, damaged) = self.fill(deliveries).await?;
        let damaged = (damaged.into_iter())
            .map(|(index, why)| (filled[index].message_id.clone(), why))
            .collect();
        let (delivered, unread) = filled.into_iter().partition(|d| d.unread.is_none());
        Ok(Filled {
            delivered,
            unread,
            damaged,
        })
    }

    /// Fills in the bodies of what a peek shows; one whose message is gone, or whose record
    /// is damaged, shows none.
    pub async fn fill_peeked(&self, peeked: Vec<Peeked>) -> Result<Vec<Peeked>, StoreError> {
        Ok(self.fill(peeked).await?.0)
    }

    /// The items, their contents filled in where the store holds them whole; and the index
    /// of each whose record is damaged, with why.
    async fn fill<T: HandedOut>(
        &self,
        mut items: Vec<T>,
    ) -> Result<(Vec<T>, Vec<(usize, String)>), StoreError> {
        let mut missing = Vec::new();
        for (index, item) in items.iter_mut().enumerate() {
            let Some(at) = item.unread() else { continue };
            match self.cache.as_ref().and_then(|c| c.get(&at)) {
                Some(content) => item.fill(content),
                None => missing.push((index, at)),
            }
        }
        if missing.is_empty() {
            return Ok((items, Vec::new()));
        }
        let keys: Vec<ContentKey> = missing.iter().map(|(_, at)| *at).collect();
        let (reader, keyring) = (self.reader.clone(), self.keyring.clone());
        let read = crate::off_async(move || read_contents(&*reader, keyring.as_deref(), &keys))
            .await
            .map_err(|e| StoreError::Failed(format!("a content read stopped: {e}")))??;
        let mut damaged = Vec::new();
        for ((index, at), content) in missing.into_iter().zip(read) {
            match content {
                ReadContent::Found(content) => {
                    if let Some(cache) = &self.cache {
                        cache.insert(at, content.clone());
                    }
                    items[index].fill(content);
                }
                ReadContent::Gone => {}
                ReadContent::Damaged(why) => damaged.push((index, why)),
            }
        }
        Ok((items, damaged))
    }

    /// The store's reader, for what else it tells (`Reader::space`; blocking).
    pub fn reader(&self) -> Arc<dyn Reader> {
        self.reader.clone()
    }
}

impl crate::Embedded {
    /// Deliveries whose content the store did not hold: each one's message was deleted
    /// meanwhile (a late delete through an earlier handle, a purge: the receive answers as if
    /// it had come first), or its record is there without its body (a damaged or edited data
    /// file), or there but damaged (`damaged`, by message id, with why: a sealed record fails
    /// its integrity check when a byte of it changed or it was moved from another's place).
    /// The latter could never be delivered, yet each receive would lease it and count a
    /// receive, and in a FIFO queue it would hold its group until retention ends: it is
    /// removed while this receive is still its latest (`Queue::forget_lost`, which counts
    /// nothing), and said in the log with its queue and id.
    pub(crate) async fn drop_contentless(
        &self,
        queue: &str,
        unread: Vec<leasehold_engine::Delivery>,
        damaged: &HashMap<String, String>,
    ) {
        let handles: Vec<String> = unread.iter().map(|d| d.receipt_handle.clone()).collect();
        let opened: Vec<_> = handles.iter().map(|h| self.sealer.open(h)).collect();
        let forgotten = self
            .on_queue(|e, sink| {
                e.on_handles(queue, opened, sink, |q, i, receipt| {
                    q.forget_lost_opened(&handles[i], receipt)
                })
            })
            .await;
        let forgotten = match forgotten {
            Ok(results) => results,
            Err(error) => {
                tracing::warn!(%error, queue, "cannot drop messages whose body is lost");
                return;
            }
        };
        let mut dropped = 0;
        for (delivery, forgotten) in unread.iter().zip(forgotten) {
            if !forgotten.is_ok_and(|removed| removed) {
                continue;
            }
            dropped += 1;
            let message_id = &delivery.message_id;
            match damaged.get(message_id) {
                Some(why) => tracing::error!(
                    queue,
                    %message_id,
                    why,
                    "a message's body in the store fails its integrity check (the data file was changed or damaged): it is not served, and is dropped"
                ),
                None => tracing::error!(
                    queue,
                    %message_id,
                    "a message's record has no body in the store (the data file is damaged or was changed): it cannot be delivered, and is dropped"
                ),
            }
        }
        // In a FIFO queue its group's next message may now go.
        self.waiters.wake_some(queue, dropped);
    }
}
