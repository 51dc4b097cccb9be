//! An object-store wrapper that counts every request, so tests and benchmarks can
//! assert read amplification.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Requests and bytes attributed to one top-level directory of the dataset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefixStats {
    /// Number of requests touching this directory.
    pub requests: u64,
    /// Bytes read from this directory.
    pub bytes_read: u64,
}

/// A snapshot of the request counter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestStats {
    /// Unconditional puts (including multipart part uploads).
    pub puts: u64,
    /// Put-if-absent / put-if-match requests.
    pub conditional_puts: u64,
    /// Whole-object GETs.
    pub gets: u64,
    /// Ranged GETs (and each range of a `get_ranges` call).
    pub get_ranges: u64,
    /// HEAD requests.
    pub heads: u64,
    /// LIST requests.
    pub lists: u64,
    /// DELETE requests.
    pub deletes: u64,
    /// Bytes returned by GETs.
    pub bytes_read: u64,
    /// Bytes sent by puts.
    pub bytes_written: u64,
    /// Per top-level directory (`data`, `_versions`, ...; `""` for root objects).
    pub by_prefix: BTreeMap<String, PrefixStats>,
}

impl RequestStats {
    /// Total number of requests of every kind.
    pub fn total_requests(&self) -> u64 {
        self.puts
            + self.conditional_puts
            + self.gets
            + self.get_ranges
            + self.heads
            + self.lists
            + self.deletes
    }
}

/// Wraps an object store and counts every call made through it.
#[derive(Debug)]
pub struct CountingStore<S> {
    inner: S,
    stats: Arc<Mutex<RequestStats>>,
}

impl<S> CountingStore<S> {
    /// Wraps `inner` with zeroed counters.
    pub fn new(inner: S) -> Self {
        CountingStore {
            inner,
            stats: Arc::new(Mutex::new(RequestStats::default())),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> RequestStats {
        todo!()
    }

    /// Zeroes the counters.
    pub fn reset(&self) {
        todo!()
    }
}
