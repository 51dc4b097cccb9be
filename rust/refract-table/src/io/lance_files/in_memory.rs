//! Lance reads of a file whose bytes are already in memory.
//!
//! A small file fetched whole ([`super::ReadMode::WholeFile`]) needs no store
//! and no I/O loop: every Lance request is a slice of the same `Bytes`,
//! answered on the spot. Reading it through an in-memory object store cost a
//! spawned I/O-loop task per file, a hop to it per request and the wake-ups
//! in between; compacting 2,000 small fragments spent more time on that than
//! on decoding them.

use std::ops::Range;
use std::sync::{Arc, LazyLock};

use bytes::Bytes;
use futures::future::{self, BoxFuture, FutureExt};
use lance_core::deepsize::{Context, DeepSizeOf};
use lance_io::object_store::ObjectStore as LanceObjectStore;
use lance_io::scheduler::{FileScheduler, ScanScheduler, SchedulerConfig};
use lance_io::traits::Reader;
use object_store::memory::InMemory;
use object_store::path::Path;
use url::Url;

use super::{PREFETCH_BLOCK_SIZE, PREFETCH_IO_PARALLELISM};

/// The store a [`ScanScheduler`] takes its I/O settings from (block size,
/// which sets how far Lance coalesces reads, and parallelism); nothing is
/// ever read from it (every file comes with its own [`BytesReader`]).
static SETTINGS_STORE: LazyLock<Arc<LanceObjectStore>> = LazyLock::new(|| {
    // A constant URL of a scheme the parser knows.
    let url = Url::parse("memory:///").expect("memory:/// is a valid URL");
    Arc::new(LanceObjectStore::new(
        Arc::new(InMemory::new()),
        url,
        Some(PREFETCH_BLOCK_SIZE),
        None,
        false,
        false,
        PREFETCH_IO_PARALLELISM,
        0,
        None,
    ))
});

/// A Lance [`FileScheduler`] over `bytes`, the whole file at `path`.
///
/// The scheduler is Lance's lite one (I/O runs when its future is polled,
/// no task of its own), one per file so readers never share a budget.
pub(super) fn scheduler_over(path: Path, bytes: Bytes, read_buffer_bytes: u64) -> FileScheduler {
    let config = SchedulerConfig {
        io_buffer_size_bytes: read_buffer_bytes,
        use_lite_scheduler: Some(true),
    };
    ScanScheduler::new(SETTINGS_STORE.clone(), config)
        .open_reader(Arc::new(BytesReader { path, bytes }))
}

/// One file's bytes as a Lance [`Reader`].
#[derive(Debug)]
struct BytesReader {
    path: Path,
    bytes: Bytes,
}

impl BytesReader {
    fn slice(&self, range: Range<usize>) -> object_store::Result<Bytes> {
        if range.start > range.end || range.end > self.bytes.len() {
            return Err(object_store::Error::Generic {
                store: "memory",
                source: format!(
                    "range {range:?} is outside the {} bytes of {}",
                    self.bytes.len(),
                    self.path
                )
                .into(),
            });
        }
        Ok(self.bytes.slice(range))
    }
}

impl DeepSizeOf for BytesReader {
    fn deep_size_of_children(&self, _context: &mut Context) -> usize {
        self.bytes.len()
    }
}

impl Reader for BytesReader {
    fn path(&self) -> &Path {
        &self.path
    }

    fn block_size(&self) -> usize {
        PREFETCH_BLOCK_SIZE
    }

    fn io_parallelism(&self) -> usize {
        PREFETCH_IO_PARALLELISM
    }

    fn size(&self) -> BoxFuture<'_, object_store::Result<usize>> {
        future::ready(Ok(self.bytes.len())).boxed()
    }

    fn get_range(&self, range: Range<usize>) -> BoxFuture<'static, object_store::Result<Bytes>> {
        future::ready(self.slice(range)).boxed()
    }

    fn get_all(&self) -> BoxFuture<'_, object_store::Result<Bytes>> {
        future::ready(Ok(self.bytes.clone())).boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheduler_coalesces_by_the_prefetch_block_size() {
        assert_eq!(SETTINGS_STORE.block_size(), PREFETCH_BLOCK_SIZE);
        assert_eq!(SETTINGS_STORE.io_parallelism(), PREFETCH_IO_PARALLELISM);
    }

    #[tokio::test]
    async fn ranges_are_slices_and_out_of_bounds_is_an_error() {
        let reader = BytesReader {
            path: Path::from("f.lance"),
            bytes: Bytes::from_static(b"0123456789"),
        };
        assert_eq!(
            reader.get_range(2..5).await.unwrap(),
            Bytes::from_static(b"234")
        );
        assert_eq!(reader.get_range(10..10).await.unwrap(), Bytes::new());
        assert_eq!(reader.size().await.unwrap(), 10);
        let err = reader.get_range(8..11).await.unwrap_err().to_string();
        assert!(err.contains("outside the 10 bytes of f.lance"), "{err}");
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = reader.get_range(5..4).await;
        assert!(backwards.is_err());
    }
}
