//! The session: caches shared by every dataset handle opened through it.

use std::sync::Arc;

use refract_core::ByteWeightedCache;

/// Default cache budget: 256 MiB.
pub const DEFAULT_SESSION_CACHE_BYTES: u64 = 256 << 20;

/// Shared state of dataset handles: one byte-weighted cache holding decoded
/// manifests, deletion vectors and (for other crates) index data.
#[derive(Debug, Clone)]
pub struct Session {
    cache: ByteWeightedCache,
}

impl Session {
    /// A session whose cache holds at most `cache_bytes` of decoded values.
    pub fn new(cache_bytes: u64) -> Self {
        Self {
            cache: ByteWeightedCache::new(cache_bytes),
        }
    }

    /// A shareable default session.
    pub fn shared() -> Arc<Session> {
        Arc::new(Session::default())
    }

    /// The shared cache.
    pub fn cache(&self) -> &ByteWeightedCache {
        &self.cache
    }
}

impl Default for Session {
    fn default() -> Self {
        Self::new(DEFAULT_SESSION_CACHE_BYTES)
    }
}
