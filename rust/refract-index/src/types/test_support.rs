//! Fixtures shared by the index types' unit tests.

use refract_core::ByteWeightedCache;
use refract_table::io::{DatasetStore, RelativePath};

use super::IndexContext;

/// A local store (so copies are hard links) under a temporary directory; the
/// directory must outlive the context.
pub(crate) async fn context() -> (IndexContext, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let ctx = IndexContext {
        store: DatasetStore::open(dir.path().to_str().unwrap(), true)
            .await
            .unwrap(),
        cache: ByteWeightedCache::new(16 << 20),
    };
    (ctx, dir)
}

/// The segment directory `_indices/<name>`.
pub(crate) fn seg(name: &str) -> RelativePath {
    RelativePath::parse(&format!("_indices/{name}")).unwrap()
}
