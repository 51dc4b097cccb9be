//! The shared, byte-weighted cache.
//!
//! One [`ByteWeightedCache`] lives in a session and is shared by every dataset
//! handle opened through it: manifests, decoded FRI ledgers, mapping readers,
//! index pages and row-map chunks all compete for one byte budget. Keys are
//! structured ([`CacheKey`] = [`CacheNamespace`] + [`KeyParts`]), never ad-hoc
//! strings, so two subsystems cannot collide by accident.
//!
//! Concurrent loads of one key are deduplicated: [`ByteWeightedCache::get_or_try_insert`]
//! runs the loader once while other callers wait for its result.

use std::any::Any;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};

/// What a cached value is; the first half of every [`CacheKey`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CacheNamespace {
    /// A decoded manifest, keyed by (dataset root, version).
    Manifest,
    /// A deletion vector, keyed by its file path.
    DeletionVector,
    /// Lance file metadata or index file contents, keyed by path.
    IndexData,
    /// A decoded and validated FRI ledger, keyed by FRI uuid.
    FriLedger,
    /// The derived index listing, keyed by (manifest version, FRI uuid).
    FriDerivedListing,
    /// A bound mapping reader, keyed by transition fingerprint + storage binding.
    MappingReader,
    /// Decoded stable-partition row-map label chunks, keyed by (fingerprint, chunk index).
    RowMapBlocks,
    /// Anything a test or plugin wants to cache.
    Other,
}

/// The typed second half of a [`CacheKey`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyParts {
    /// An object path (relative to the store root).
    Path(String),
    /// A dataset root and a manifest version.
    RootVersion {
        /// The dataset root URI.
        root: String,
        /// The manifest version.
        version: u64,
    },
    /// A uuid.
    Uuid(u128),
    /// A manifest version and a uuid.
    VersionUuid {
        /// The manifest version.
        version: u64,
        /// The uuid.
        uuid: u128,
    },
    /// A content fingerprint and a storage binding (root URI).
    FingerprintBinding {
        /// The content fingerprint.
        fingerprint: [u8; 32],
        /// The root URI the content is bound to.
        binding: String,
    },
    /// A content fingerprint and a chunk index.
    FingerprintChunk {
        /// The content fingerprint.
        fingerprint: [u8; 32],
        /// The chunk index.
        chunk: u64,
    },
    /// A free-form key for [`CacheNamespace::Other`].
    Named(String),
}

/// A structured cache key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// What kind of value this is.
    pub namespace: CacheNamespace,
    /// Which value of that kind.
    pub parts: KeyParts,
}

impl CacheKey {
    /// Builds a key.
    pub fn new(namespace: CacheNamespace, parts: KeyParts) -> Self {
        Self { namespace, parts }
    }
}

/// Values stored in the cache report their decoded, in-memory size so the byte
/// budget holds.
pub trait DeepSize {
    /// Approximate heap + inline bytes held by this value.
    fn deep_size_bytes(&self) -> usize;
}

#[derive(Clone)]
struct Entry {
    value: Arc<dyn Any + Send + Sync>,
    weight: u32,
}

/// Hit/miss/load counters of a cache, for tests and benchmarks.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups that found a value.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Loader invocations (after deduplication).
    pub loads: u64,
}

#[derive(Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    loads: AtomicU64,
}

/// A byte-weighted, async, deduplicating cache shared across dataset handles.
#[derive(Clone)]
pub struct ByteWeightedCache {
    inner: moka::future::Cache<CacheKey, Entry>,
    capacity_bytes: u64,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for ByteWeightedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteWeightedCache")
            .field("capacity_bytes", &self.capacity_bytes)
            .field("entries", &self.inner.entry_count())
            .finish()
    }
}

impl ByteWeightedCache {
    /// Creates a cache holding at most `capacity_bytes` of decoded values.
    pub fn new(capacity_bytes: u64) -> Self {
        let inner = moka::future::Cache::builder()
            .max_capacity(capacity_bytes)
            .weigher(|_key: &CacheKey, entry: &Entry| entry.weight)
            .build();
        Self {
            inner,
            capacity_bytes,
            counters: Arc::new(Counters::default()),
        }
    }

    /// The configured byte budget.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// Looks up `key`, returning the value if present and of type `T`.
    pub async fn get<T: Send + Sync + 'static>(&self, key: &CacheKey) -> Option<Arc<T>> {
        let found = self
            .inner
            .get(key)
            .await
            .and_then(|entry| entry.value.downcast::<T>().ok());
        self.count_lookup(found.is_some());
        found
    }

    /// Inserts `value` under `key`, weighed by its [`DeepSize`].
    pub async fn insert<T: DeepSize + Send + Sync + 'static>(&self, key: CacheKey, value: Arc<T>) {
        let weight = weight_of(value.as_ref());
        self.inner.insert(key, Entry { value, weight }).await;
    }

    /// Returns the cached value for `key`, or runs `load` once (concurrent callers
    /// for the same key wait for that one load) and caches its result.
    ///
    /// # Errors
    /// Whatever `load` returns (every caller waiting on that load gets the same
    /// kind; nothing is cached); InvalidInput when `key` already holds a value
    /// of another type.
    pub async fn get_or_try_insert<T, F>(&self, key: CacheKey, load: F) -> Result<Arc<T>>
    where
        T: DeepSize + Send + Sync + 'static,
        F: Future<Output = Result<T>>,
    {
        if let Some(hit) = self.get::<T>(&key).await {
            return Ok(hit);
        }
        let counters = self.counters.clone();
        let entry = self
            .inner
            .try_get_with(key, async move {
                counters.loads.fetch_add(1, Ordering::Relaxed);
                let value = load.await?;
                let weight = weight_of(&value);
                Ok::<Entry, Error>(Entry {
                    value: Arc::new(value),
                    weight,
                })
            })
            .await
            .map_err(|shared| clone_error(&shared))?;
        entry
            .value
            .downcast::<T>()
            .map_err(|_| Error::invalid_input("cache key reused for a value of a different type"))
    }

    /// Removes `key`.
    pub async fn invalidate(&self, key: &CacheKey) {
        self.inner.invalidate(key).await;
    }

    /// Drops every entry.
    pub fn clear(&self) {
        self.inner.invalidate_all();
    }

    /// Number of entries (after pending maintenance).
    pub async fn entry_count(&self) -> u64 {
        self.inner.run_pending_tasks().await;
        self.inner.entry_count()
    }

    /// Total weight of the entries (after pending maintenance).
    pub async fn weighted_size(&self) -> u64 {
        self.inner.run_pending_tasks().await;
        self.inner.weighted_size()
    }

    /// Hit/miss/load counters so far.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.counters.hits.load(Ordering::Relaxed),
            misses: self.counters.misses.load(Ordering::Relaxed),
            loads: self.counters.loads.load(Ordering::Relaxed),
        }
    }

    fn count_lookup(&self, hit: bool) {
        let counter = if hit {
            &self.counters.hits
        } else {
            &self.counters.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

fn weight_of<T: DeepSize>(value: &T) -> u32 {
    u32::try_from(value.deep_size_bytes().max(1)).unwrap_or(u32::MAX)
}

/// Rebuilds an error shared by a deduplicated load so every waiter gets its own,
/// keeping the error kind.
fn clone_error(shared: &Arc<Error>) -> Error {
    match shared.as_ref() {
        Error::InvalidInput { message } => Error::invalid_input(message.clone()),
        Error::Corrupt { what, message } => Error::corrupt(what.clone(), message.clone()),
        Error::NotSupported { message } => Error::not_supported(message.clone()),
        Error::NotFound { message } => Error::not_found(message.clone()),
        Error::Conflict { message, retryable } => Error::conflict(message.clone(), *retryable),
        Error::PathEscape { path } => Error::PathEscape { path: path.clone() },
        Error::OverBudget {
            estimated_bytes,
            budget_bytes,
        } => Error::OverBudget {
            estimated_bytes: *estimated_bytes,
            budget_bytes: *budget_bytes,
        },
        Error::FragmentRowsUnknown { fragment_id } => Error::FragmentRowsUnknown {
            fragment_id: *fragment_id,
        },
        Error::StoredFragmentsUnknown => Error::StoredFragmentsUnknown,
        Error::External { context, .. } => Error::External {
            context: context.clone(),
            source: Box::new(SharedSource(shared.clone())),
        },
    }
}

/// The source of a shared [`Error::External`], kept whole so callers can still
/// walk the source chain (e.g. to find an object-store error kind).
#[derive(Debug)]
struct SharedSource(Arc<Error>);

impl std::fmt::Display for SharedSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_ref() {
            Error::External { source, .. } => source.fmt(f),
            other => other.fmt(f),
        }
    }
}

impl std::error::Error for SharedSource {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self.0.as_ref() {
            // The original source itself, so it can be downcast (its message is
            // also shown by Display, as the shared error has no message of its own).
            Error::External { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Blob(Vec<u8>);
    impl DeepSize for Blob {
        fn deep_size_bytes(&self) -> usize {
            self.0.len()
        }
    }

    fn key(name: &str) -> CacheKey {
        CacheKey::new(CacheNamespace::Other, KeyParts::Named(name.to_string()))
    }

    #[tokio::test]
    async fn concurrent_loads_of_one_key_run_once() {
        let cache = ByteWeightedCache::new(1 << 20);
        let loads = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let cache = cache.clone();
            let loads = loads.clone();
            tasks.push(tokio::spawn(async move {
                cache
                    .get_or_try_insert(key("a"), async move {
                        loads.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                        Ok(Blob(vec![7; 100]))
                    })
                    .await
                    .map(|blob| blob.0.len())
            }));
        }
        for task in tasks {
            assert_eq!(task.await.unwrap().unwrap(), 100);
        }
        assert_eq!(loads.load(Ordering::SeqCst), 1);
        assert_eq!(cache.stats().loads, 1);
    }

    #[tokio::test]
    async fn byte_budget_is_respected() {
        let cache = ByteWeightedCache::new(1_000);
        for i in 0..50 {
            cache
                .insert(key(&i.to_string()), Arc::new(Blob(vec![0; 100])))
                .await;
        }
        assert!(cache.weighted_size().await <= 1_000);
    }

    #[tokio::test]
    async fn failed_load_keeps_error_kind_and_caches_nothing() {
        let cache = ByteWeightedCache::new(1 << 20);
        let err = cache
            .get_or_try_insert::<Blob, _>(key("bad"), async { Err(Error::corrupt("row map", "x")) })
            .await
            .err()
            .unwrap();
        assert!(matches!(err, Error::Corrupt { .. }));
        assert!(cache.get::<Blob>(&key("bad")).await.is_none());
    }
}
