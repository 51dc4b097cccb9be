//! An object-store wrapper that counts every request, so tests and benchmarks can
//! assert read amplification.
//!
//! Requests are attributed to the top-level directory of the object they touch
//! (`data`, `_versions`, `_deletions`, `_indices`, ...), which is what read
//! amplification assertions care about ("opening a dataset reads no data file").
//!
//! The counter also follows round trips: the longest chain of requests in
//! which each starts only after the one before it has returned. On a store
//! where every request costs a network round trip, that chain, not the
//! request count, is what an operation waits for.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    CopyMode, CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
    RenameTargetMode, UploadPart,
};

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
    /// Unconditional puts: single puts, multipart starts and each multipart part.
    pub puts: u64,
    /// Put-if-absent / put-if-match requests (and copies/renames that refuse to overwrite).
    pub conditional_puts: u64,
    /// Whole-object GETs.
    pub gets: u64,
    /// Ranged GETs (each range of a `get_ranges` call counts once).
    pub get_ranges: u64,
    /// HEAD requests.
    pub heads: u64,
    /// LIST requests (recursive, delimited or with offset).
    pub lists: u64,
    /// DELETE requests (one per deleted path).
    pub deletes: u64,
    /// Bytes returned by GETs.
    pub bytes_read: u64,
    /// Bytes sent by puts.
    pub bytes_written: u64,
    /// Per top-level directory (`data`, `_versions`, ...; `""` for objects at the root
    /// and for listings of the whole store).
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

    /// Requests attributed to the top-level directory `dir` (0 when untouched).
    pub fn requests_under(&self, dir: &str) -> u64 {
        self.by_prefix.get(dir).map_or(0, |p| p.requests)
    }
}

/// The kinds of request the counter distinguishes.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Put,
    ConditionalPut,
    Get,
    GetRange,
    Head,
    List,
    Delete,
}

/// Shared, lockable counters (shared with in-flight multipart uploads).
#[derive(Debug, Default)]
struct Counters {
    stats: Mutex<RequestStats>,
    /// Multipart parts whose upload has started and not finished.
    parts_in_flight: AtomicU64,
    /// The most parts in flight at once since the last reset.
    max_parts_in_flight: AtomicU64,
    /// The longest chain among the requests returned since the last reset
    /// (see [`CountingStore::round_trips`]).
    round_trips: AtomicU64,
}

impl Counters {
    fn lock(&self) -> MutexGuard<'_, RequestStats> {
        // Counters stay meaningful even if a panicking test thread poisoned the lock.
        self.stats
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn part_started(&self) {
        let now = self.parts_in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_parts_in_flight.fetch_max(now, Ordering::SeqCst);
    }

    fn part_finished(&self) {
        self.parts_in_flight.fetch_sub(1, Ordering::SeqCst);
    }

    /// Awaits `request`, one round trip after the longest chain of requests
    /// that had returned when it started.
    async fn round_trip<T>(&self, request: impl Future<Output = T>) -> T {
        let depth = self.round_trips.load(Ordering::SeqCst) + 1;
        let out = request.await;
        self.round_trips.fetch_max(depth, Ordering::SeqCst);
        out
    }

    /// A request whose answer streams (listings, deletes): counted as
    /// returning when it starts.
    fn streamed_round_trip(&self) {
        let depth = self.round_trips.load(Ordering::SeqCst) + 1;
        self.round_trips.fetch_max(depth, Ordering::SeqCst);
    }

    fn record(&self, kind: Kind, dir: String, bytes_read: u64, bytes_written: u64) {
        let mut stats = self.lock();
        match kind {
            Kind::Put => stats.puts += 1,
            Kind::ConditionalPut => stats.conditional_puts += 1,
            Kind::Get => stats.gets += 1,
            Kind::GetRange => stats.get_ranges += 1,
            Kind::Head => stats.heads += 1,
            Kind::List => stats.lists += 1,
            Kind::Delete => stats.deletes += 1,
        }
        stats.bytes_read += bytes_read;
        stats.bytes_written += bytes_written;
        let prefix = stats.by_prefix.entry(dir).or_default();
        prefix.requests += 1;
        prefix.bytes_read += bytes_read;
    }
}

/// The top-level directory holding the object at `location`; `""` for a root object.
fn object_dir(location: &Path) -> String {
    let mut parts = location.parts();
    match (parts.next(), parts.next()) {
        (Some(first), Some(_)) => first.as_ref().to_string(),
        _ => String::new(),
    }
}

/// The top-level directory a listing of `prefix` covers; `""` for the whole store.
fn prefix_dir(prefix: Option<&Path>) -> String {
    prefix
        .and_then(|p| p.parts().next())
        .map(|first| first.as_ref().to_string())
        .unwrap_or_default()
}

/// Wraps an object store and counts every call made through it.
#[derive(Debug)]
pub struct CountingStore<S> {
    inner: S,
    counters: Arc<Counters>,
}

impl<S> CountingStore<S> {
    /// Wraps `inner` with zeroed counters.
    pub fn new(inner: S) -> Self {
        CountingStore {
            inner,
            counters: Arc::new(Counters::default()),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> RequestStats {
        self.counters.lock().clone()
    }

    /// Zeroes the counters.
    pub fn reset(&self) {
        *self.counters.lock() = RequestStats::default();
        // Parts still in flight keep counting down; the peak restarts from them.
        let now = self.counters.parts_in_flight.load(Ordering::SeqCst);
        self.counters
            .max_parts_in_flight
            .store(now, Ordering::SeqCst);
        self.counters.round_trips.store(0, Ordering::SeqCst);
    }

    /// The most multipart parts uploading at once since the last reset.
    pub fn max_parts_in_flight(&self) -> u64 {
        self.counters.max_parts_in_flight.load(Ordering::SeqCst)
    }

    /// Round trips since the last reset: the longest chain of requests in
    /// which each started after the one before it had returned (a GET's
    /// body may still stream after it returns; listings and deletes count as
    /// returning when they start). With a store whose latency dominates the
    /// work between requests, this is the operation's time in latencies.
    /// A request still in flight at a reset counts its chain from before it.
    pub fn round_trips(&self) -> u64 {
        self.counters.round_trips.load(Ordering::SeqCst)
    }
}

impl<S: fmt::Display> fmt::Display for CountingStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CountingStore({})", self.inner)
    }
}

fn is_conditional(mode: &PutMode) -> bool {
    !matches!(mode, PutMode::Overwrite)
}

#[async_trait]
impl<S: ObjectStore> ObjectStore for CountingStore<S> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let kind = if is_conditional(&opts.mode) {
            Kind::ConditionalPut
        } else {
            Kind::Put
        };
        let len = payload.content_length() as u64;
        self.counters.record(kind, object_dir(location), 0, len);
        self.counters
            .round_trip(self.inner.put_opts(location, payload, opts))
            .await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.counters.record(Kind::Put, object_dir(location), 0, 0);
        let upload = self
            .counters
            .round_trip(self.inner.put_multipart_opts(location, opts))
            .await?;
        Ok(Box::new(CountingUpload {
            inner: upload,
            location: location.clone(),
            counters: self.counters.clone(),
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let kind = if options.head {
            Kind::Head
        } else if options.range.is_some() {
            Kind::GetRange
        } else {
            Kind::Get
        };
        let head = options.head;
        let result = self
            .counters
            .round_trip(self.inner.get_opts(location, options))
            .await;
        // Bytes come from the returned range so the body is not consumed here.
        let bytes = match (&result, head) {
            (Ok(r), false) => r.range.end.saturating_sub(r.range.start),
            _ => 0,
        };
        self.counters.record(kind, object_dir(location), bytes, 0);
        result
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        for range in ranges {
            let len = range.end.saturating_sub(range.start);
            self.counters
                .record(Kind::GetRange, object_dir(location), len, 0);
        }
        self.counters
            .round_trip(self.inner.get_ranges(location, ranges))
            .await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.counters.streamed_round_trip();
        let counters = self.counters.clone();
        let counted = locations
            .map(move |location| {
                if let Ok(path) = &location {
                    counters.record(Kind::Delete, object_dir(path), 0, 0);
                }
                location
            })
            .boxed();
        self.inner.delete_stream(counted)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.counters.record(Kind::List, prefix_dir(prefix), 0, 0);
        self.counters.streamed_round_trip();
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.counters.record(Kind::List, prefix_dir(prefix), 0, 0);
        self.counters.streamed_round_trip();
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.counters.record(Kind::List, prefix_dir(prefix), 0, 0);
        self.counters
            .round_trip(self.inner.list_with_delimiter(prefix))
            .await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        let kind = match options.mode {
            CopyMode::Create => Kind::ConditionalPut,
            CopyMode::Overwrite => Kind::Put,
        };
        self.counters.record(kind, object_dir(to), 0, 0);
        self.counters
            .round_trip(self.inner.copy_opts(from, to, options))
            .await
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        let kind = match options.target_mode {
            RenameTargetMode::Create => Kind::ConditionalPut,
            RenameTargetMode::Overwrite => Kind::Put,
        };
        self.counters.record(kind, object_dir(to), 0, 0);
        self.counters
            .round_trip(self.inner.rename_opts(from, to, options))
            .await
    }
}

/// Counts the parts of a multipart upload.
#[derive(Debug)]
struct CountingUpload {
    inner: Box<dyn MultipartUpload>,
    location: Path,
    counters: Arc<Counters>,
}

#[async_trait]
impl MultipartUpload for CountingUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let len = data.content_length() as u64;
        self.counters
            .record(Kind::Put, object_dir(&self.location), 0, len);
        self.counters.part_started();
        let part = self.inner.put_part(data);
        let counters = self.counters.clone();
        Box::pin(async move {
            let uploaded = counters.round_trip(part).await;
            counters.part_finished();
            uploaded
        })
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        self.counters.round_trip(self.inner.complete()).await
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.inner.abort().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt;
    use object_store::memory::InMemory;
    use object_store::ObjectStoreExt;

    const _: () = {
        const fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<CountingStore<InMemory>>();
    };

    #[tokio::test]
    async fn counts_every_kind_and_attributes_directories() {
        let store = CountingStore::new(InMemory::new());
        let file = Path::from("data/a.lance");
        store
            .put(&file, PutPayload::from_static(b"0123456789"))
            .await
            .unwrap();
        store
            .put(&Path::from("root-object"), PutPayload::from_static(b"r"))
            .await
            .unwrap();
        store.get(&file).await.unwrap().bytes().await.unwrap();
        store.get_range(&file, 2..5).await.unwrap();
        store.get_ranges(&file, &[0..1, 4..8]).await.unwrap();
        store.head(&file).await.unwrap();
        let _: Vec<_> = store
            .list(Some(&Path::from("data")))
            .try_collect()
            .await
            .unwrap();
        store.list_with_delimiter(None).await.unwrap();
        let mut upload = store
            .put_multipart(&Path::from("_indices/u/big"))
            .await
            .unwrap();
        upload
            .put_part(PutPayload::from_static(b"abc"))
            .await
            .unwrap();
        upload
            .put_part(PutPayload::from_static(b"de"))
            .await
            .unwrap();
        upload.complete().await.unwrap();
        store.delete(&file).await.unwrap();

        let stats = store.stats();
        assert_eq!(stats.puts, 2 + 3, "2 puts, 1 multipart start, 2 parts");
        assert_eq!(stats.conditional_puts, 0);
        assert_eq!(stats.gets, 1);
        assert_eq!(stats.get_ranges, 3);
        assert_eq!(stats.heads, 1);
        assert_eq!(stats.lists, 2);
        assert_eq!(stats.deletes, 1);
        assert_eq!(stats.bytes_read, 10 + 3 + 1 + 4);
        assert_eq!(stats.bytes_written, 10 + 1 + 5);
        assert_eq!(
            stats.by_prefix["data"],
            PrefixStats {
                requests: 8,
                bytes_read: 18
            }
        );
        assert_eq!(stats.by_prefix[""].requests, 2, "root put + root listing");
        assert_eq!(stats.by_prefix["_indices"].requests, 3);
        assert_eq!(stats.total_requests(), 13);
        assert_eq!(stats.requests_under("_versions"), 0);

        store.reset();
        assert_eq!(store.stats(), RequestStats::default());
    }

    /// Requests awaited one after another chain; requests in flight together
    /// add one round trip between them, however many they are.
    #[tokio::test]
    async fn round_trips_follow_the_longest_chain_of_requests() {
        let store = CountingStore::new(crate::testing::with_latency(
            Arc::new(InMemory::new()),
            std::time::Duration::from_millis(50),
        ));
        let paths: Vec<Path> = (0..4).map(|i| Path::from(format!("data/{i}"))).collect();
        for path in &paths {
            store
                .put(path, PutPayload::from_static(b"x"))
                .await
                .unwrap();
        }
        assert_eq!(store.round_trips(), 4);
        store.reset();
        assert_eq!(store.round_trips(), 0);
        // Four GETs at once, then one after them: two round trips.
        futures::future::try_join_all(paths.iter().map(|p| store.get_range(p, 0..1)))
            .await
            .unwrap();
        store.head(&paths[0]).await.unwrap();
        assert_eq!(store.round_trips(), 2);
        assert_eq!(store.stats().total_requests(), 5);
        // A listing counts when it starts: a GET after it is one more.
        let _: Vec<_> = store.list(None).try_collect().await.unwrap();
        store.head(&paths[1]).await.unwrap();
        assert_eq!(store.round_trips(), 4);
    }

    #[tokio::test]
    async fn conditional_puts_and_failed_reads_are_counted() {
        let store = CountingStore::new(InMemory::new());
        let path = Path::from("_versions/1.manifest");
        let create = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        store
            .put_opts(&path, PutPayload::from_static(b"m"), create.clone())
            .await
            .unwrap();
        assert!(store
            .put_opts(&path, PutPayload::from_static(b"m"), create)
            .await
            .is_err());
        assert!(store
            .get(&Path::from("_versions/2.manifest"))
            .await
            .is_err());
        let stats = store.stats();
        assert_eq!(stats.conditional_puts, 2);
        assert_eq!(stats.gets, 1);
        assert_eq!(stats.bytes_read, 0);
        assert_eq!(stats.requests_under("_versions"), 3);
    }
}
