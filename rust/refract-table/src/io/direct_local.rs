//! A local-disk object store whose large writes bypass the page cache.
//!
//! Multipart uploads — the large objects: compaction outputs, big index files —
//! are written with `O_DIRECT` on Linux. Why: a freshly written output is rarely
//! read again soon, so caching it only evicts hotter pages; and on virtual
//! machines whose free guest memory is handed back to the host, every fresh
//! page-cache page costs a host fault. On the reference machine a 256 MiB
//! buffered write took 1.5–2.3 s and the same write with `O_DIRECT` 0.13 s
//! (docs/benchmarks.md, Compaction). Recursive listings and deletes never
//! follow a symbolic link (see `no_follow`: garbage collection must not leave
//! the root). Everything else — reads, one-level listings, small puts, copies,
//! renames — is delegated unchanged to `object_store`'s [`LocalFileSystem`],
//! and uploads keep its conventions: parts go to a staging file `<dest>#<n>`
//! (hidden from listings) that is renamed into place on completion, so the
//! object appears whole or not at all.
//!
//! Direct I/O needs block-aligned offsets, lengths and memory. Each part is
//! copied through a reused, aligned buffer from a small shared pool; a part
//! that starts at an unaligned offset, and the unaligned tail of a part, are
//! written through a second, ordinary descriptor of the same file (the two
//! never share a page).
//! Where the file system refuses `O_DIRECT` (at open or on a write, `EINVAL`),
//! the upload silently continues with ordinary writes. The storage option
//! [`DIRECT_WRITES_OPTION`]` = false` turns direct writes off for a dataset
//! (the CLI maps `REFRACT_DIRECT_WRITES=0` onto it).

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt, TryFutureExt};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
    UploadPart,
};

use super::no_follow;

/// Storage option of a local dataset: `false` (or `0`) turns direct writes off.
pub const DIRECT_WRITES_OPTION: &str = "refract_direct_writes";

/// Alignment of direct writes: offsets, lengths and memory. 4 KiB satisfies
/// both 512-byte and 4 KiB logical block sizes.
const DIRECT_ALIGN: usize = 4096;
/// Size of the aligned buffer parts are copied through.
const BOUNCE_BYTES: usize = 1 << 20;
/// Bounce buffers kept for reuse between writes.
const IDLE_BOUNCE_BUFFERS: usize = 2;
/// Deletes of one `delete_stream` running at once (as `LocalFileSystem`).
const DELETES_IN_FLIGHT: usize = 10;
/// Name used in `object_store` errors raised here.
const STORE_NAME: &str = "DirectLocalStore";

/// Bounce buffers shared by every upload of the process, reused across parts
/// so a long upload touches no fresh memory per part. A write takes one and
/// gives it back; at most [`IDLE_BOUNCE_BUFFERS`] wait idle, so the memory
/// follows the writes in flight, not the blocking threads that ever wrote
/// (a per-thread buffer held 1 MiB in every thread of tokio's blocking pool).
static BOUNCE_POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// Runs `write` with a bounce buffer from [`BOUNCE_POOL`].
fn with_bounce<R>(write: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    // A poisoned pool only means a writer panicked; its buffers are plain bytes.
    let taken = BOUNCE_POOL
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .pop();
    let mut buffer = taken.unwrap_or_default();
    let result = write(&mut buffer);
    let mut pool = BOUNCE_POOL.lock().unwrap_or_else(PoisonError::into_inner);
    if pool.len() < IDLE_BOUNCE_BUFFERS {
        pool.push(buffer);
    }
    result
}

/// `object_store`'s local file system with page-cache-bypassing multipart
/// uploads, and recursive listings and deletes that never follow a symbolic
/// link.
///
/// Invariant: `root` is the directory `inner` is rooted at, so every key maps
/// to a path below it.
#[derive(Debug)]
pub struct DirectLocalStore {
    inner: Arc<LocalFileSystem>,
    root: Arc<PathBuf>,
    direct: bool,
}

impl DirectLocalStore {
    /// A store rooted at the existing directory `root`, direct writes on.
    ///
    /// # Errors
    /// When `root` cannot be resolved to an absolute path.
    pub fn new(root: &std::path::Path) -> object_store::Result<Self> {
        Self::with_direct_writes(root, true)
    }

    /// Like [`Self::new`], choosing direct writes explicitly (`false`: plain
    /// writes, still through this store's staging and rename).
    ///
    /// # Errors
    /// As [`Self::new`].
    pub fn with_direct_writes(root: &std::path::Path, direct: bool) -> object_store::Result<Self> {
        let root = std::fs::canonicalize(root).map_err(generic_error)?;
        Ok(DirectLocalStore {
            inner: Arc::new(LocalFileSystem::new_with_prefix(&root)?),
            root: Arc::new(root),
            direct,
        })
    }

    /// The objects under `prefix` (everything when `None`) after `offset`,
    /// listed without following links.
    fn list_after(
        &self,
        prefix: Option<&Path>,
        offset: Option<&Path>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let start = match prefix.filter(|p| !p.as_ref().is_empty()) {
            Some(prefix) => match self.inner.path_to_filesystem(prefix) {
                Ok(start) => start,
                Err(err) => return futures::stream::once(async { Err(err) }).boxed(),
            },
            None => self.root.to_path_buf(),
        };
        let root = self.root.clone();
        let offset = offset.cloned();
        let listing = async move {
            let mut objects = run_blocking(move || no_follow::list(&root, &start)).await?;
            if let Some(offset) = offset {
                objects.retain(|object| object.location > offset);
            }
            Ok::<_, object_store::Error>(futures::stream::iter(objects.into_iter().map(Ok)))
        };
        listing.try_flatten_stream().boxed()
    }
}

impl fmt::Display for DirectLocalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{STORE_NAME}({})", self.inner)
    }
}

fn generic_error(err: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> object_store::Error {
    object_store::Error::Generic {
        store: STORE_NAME,
        source: err.into(),
    }
}

/// Runs blocking file work off the async workers when a runtime is present.
async fn run_blocking<T: Send + 'static>(
    work: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> object_store::Result<T> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => handle
            .spawn_blocking(work)
            .await
            .map_err(generic_error)?
            .map_err(generic_error),
        Err(_) => work().map_err(generic_error),
    }
}

#[async_trait]
impl ObjectStore for DirectLocalStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        if !opts.attributes.is_empty() {
            // The inner store reports attributes as unsupported.
            return self.inner.put_multipart_opts(location, opts).await;
        }
        let dest = self.inner.path_to_filesystem(location)?;
        let direct = self.direct;
        let state = run_blocking(move || UploadState::create(dest, direct)).await?;
        Ok(Box::new(DirectUpload {
            state: Arc::new(state),
            open: true,
            offset: 0,
            location: location.clone(),
            store: self.inner.clone(),
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let inner = self.inner.clone();
        let root = self.root.clone();
        locations
            .map(move |location| {
                let inner = inner.clone();
                let root = root.clone();
                async move {
                    let location = location?;
                    let target = inner.path_to_filesystem(&location)?;
                    // The delete's own result, so a missing file stays NotFound.
                    let removed =
                        run_blocking(move || Ok(no_follow::delete(&root, &target))).await?;
                    match removed {
                        Ok(()) => Ok(location),
                        Err(err) if err.kind() == io::ErrorKind::NotFound => {
                            Err(object_store::Error::NotFound {
                                path: location.to_string(),
                                source: Box::new(err),
                            })
                        }
                        Err(err) => Err(generic_error(err)),
                    }
                }
            })
            .buffered(DELETES_IN_FLIGHT)
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.list_after(prefix, None)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.list_after(prefix, Some(offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

/// The staging file of one upload, shared by its in-flight parts.
#[derive(Debug)]
struct UploadState {
    dest: PathBuf,
    staging: PathBuf,
    /// Ordinary descriptor: unaligned pieces, and everything once direct fails.
    buffered: File,
    /// `O_DIRECT` descriptor of the same file, when the file system allows it.
    direct: Option<File>,
    /// Cleared on the first `EINVAL` from a direct write.
    direct_usable: AtomicBool,
    /// Bytes written through `direct` (tests check the path is really taken).
    direct_bytes: AtomicU64,
}

impl UploadState {
    fn create(dest: PathBuf, direct: bool) -> io::Result<Self> {
        let (buffered, staging) = create_staging(&dest)?;
        let direct = if direct { open_direct(&staging) } else { None };
        Ok(UploadState {
            dest,
            staging,
            buffered,
            direct_usable: AtomicBool::new(direct.is_some()),
            direct,
            direct_bytes: AtomicU64::new(0),
        })
    }

    /// Writes one part's bytes at `offset`.
    fn write_part(&self, offset: u64, data: &PutPayload) -> io::Result<()> {
        let aligned_start = offset.is_multiple_of(DIRECT_ALIGN as u64);
        if aligned_start && data.content_length() >= DIRECT_ALIGN && self.direct_usable() {
            let written = with_bounce(|bounce| self.write_through_bounce(bounce, offset, data))?;
            if written {
                return Ok(());
            }
        }
        let mut at = offset;
        for chunk in data.iter() {
            self.buffered.write_all_at(chunk, at)?;
            at += chunk.len() as u64;
        }
        Ok(())
    }

    fn direct_usable(&self) -> bool {
        self.direct.is_some() && self.direct_usable.load(Ordering::Relaxed)
    }

    /// Copies `data` through the aligned buffer, writing full aligned blocks
    /// directly and the unaligned tail through the ordinary descriptor.
    /// Returns false (nothing written) when no aligned buffer can be carved.
    fn write_through_bounce(
        &self,
        bounce: &mut Vec<u8>,
        offset: u64,
        data: &PutPayload,
    ) -> io::Result<bool> {
        if bounce.len() < BOUNCE_BYTES + DIRECT_ALIGN {
            bounce.resize(BOUNCE_BYTES + DIRECT_ALIGN, 0);
        }
        let start = bounce.as_ptr().align_offset(DIRECT_ALIGN);
        if start >= DIRECT_ALIGN {
            return Ok(false);
        }
        let buffer = &mut bounce[start..start + BOUNCE_BYTES];
        let mut filled = 0;
        let mut at = offset;
        for chunk in data.iter() {
            let mut rest: &[u8] = chunk;
            while !rest.is_empty() {
                let take = rest.len().min(BOUNCE_BYTES - filled);
                buffer[filled..filled + take].copy_from_slice(&rest[..take]);
                filled += take;
                rest = &rest[take..];
                if filled == BOUNCE_BYTES {
                    self.write_aligned(&buffer[..filled], at)?;
                    at += filled as u64;
                    filled = 0;
                }
            }
        }
        let aligned = filled / DIRECT_ALIGN * DIRECT_ALIGN;
        if aligned > 0 {
            self.write_aligned(&buffer[..aligned], at)?;
            at += aligned as u64;
        }
        if filled > aligned {
            self.buffered.write_all_at(&buffer[aligned..filled], at)?;
        }
        Ok(true)
    }

    /// Writes block-aligned bytes directly, or through the ordinary descriptor
    /// once the file system has refused a direct write.
    fn write_aligned(&self, bytes: &[u8], at: u64) -> io::Result<()> {
        if let (Some(direct), true) = (&self.direct, self.direct_usable()) {
            match direct.write_all_at(bytes, at) {
                Ok(()) => {
                    self.direct_bytes
                        .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    return Ok(());
                }
                Err(e) if is_unsupported_direct(&e) => {
                    self.direct_usable.store(false, Ordering::Relaxed);
                }
                Err(e) => return Err(e),
            }
        }
        // pwrite is idempotent: a partly done direct write is simply redone.
        self.buffered.write_all_at(bytes, at)
    }
}

/// `EINVAL` from a direct write means the file system cannot do it here.
fn is_unsupported_direct(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::InvalidInput
}

/// Creates `<dest>#<n>` for the first free `n`, creating parent directories.
fn create_staging(dest: &std::path::Path) -> io::Result<(File, PathBuf)> {
    let mut id: u64 = 1;
    let mut created_parents = false;
    loop {
        let mut name = dest.as_os_str().to_owned();
        name.push(format!("#{id}"));
        let staging = PathBuf::from(name);
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&staging)
        {
            Ok(file) => return Ok((file, staging)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                id = id.checked_add(1).ok_or_else(|| {
                    io::Error::other(format!("no free staging name for {}", dest.display()))
                })?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound && !created_parents => {
                let parent = dest.parent().ok_or(e)?;
                std::fs::create_dir_all(parent)?;
                created_parents = true;
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(target_os = "linux")]
fn open_direct(path: &std::path::Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .ok()
}

#[cfg(not(target_os = "linux"))]
fn open_direct(_path: &std::path::Path) -> Option<File> {
    None
}

/// One multipart upload into a staging file.
#[derive(Debug)]
struct DirectUpload {
    state: Arc<UploadState>,
    /// False once completed or aborted.
    open: bool,
    /// Where the next part goes.
    offset: u64,
    location: Path,
    store: Arc<LocalFileSystem>,
}

fn closed_error() -> object_store::Error {
    generic_error("the upload was already completed or aborted")
}

#[async_trait]
impl MultipartUpload for DirectUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        if !self.open {
            return futures::future::ready(Err(closed_error())).boxed();
        }
        let offset = self.offset;
        self.offset += data.content_length() as u64;
        let state = self.state.clone();
        run_blocking(move || state.write_part(offset, &data)).boxed()
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        if !self.open {
            return Err(closed_error());
        }
        self.open = false;
        let state = self.state.clone();
        run_blocking(move || std::fs::rename(&state.staging, &state.dest)).await?;
        let meta = self.store.head(&self.location).await?;
        Ok(PutResult {
            e_tag: meta.e_tag,
            version: meta.version,
            extensions: Default::default(),
        })
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        if !self.open {
            return Err(closed_error());
        }
        self.open = false;
        let state = self.state.clone();
        run_blocking(move || std::fs::remove_file(&state.staging)).await
    }
}

impl Drop for DirectUpload {
    fn drop(&mut self) {
        if self.open {
            // Best effort, like object_store's own uploads: a dropped upload
            // leaves no staging file behind.
            let _ = std::fs::remove_file(&self.state.staging);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::future::join_all;

    #[test]
    fn concurrent_writes_leave_at_most_the_idle_bounce_buffers() {
        let writers = IDLE_BOUNCE_BUFFERS + 3;
        let together = std::sync::Barrier::new(writers);
        std::thread::scope(|scope| {
            for _ in 0..writers {
                scope.spawn(|| {
                    with_bounce(|buffer| {
                        buffer.resize(BOUNCE_BYTES, 1);
                        // Every writer holds its own buffer at this point.
                        together.wait();
                    })
                });
            }
        });
        let idle = BOUNCE_POOL.lock().unwrap();
        assert!(idle.len() <= IDLE_BOUNCE_BUFFERS, "{} idle", idle.len());
    }

    fn store(dir: &tempfile::TempDir, direct: bool) -> DirectLocalStore {
        DirectLocalStore::with_direct_writes(dir.path(), direct).unwrap()
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    /// Uploads `parts` (all issued before any is awaited, then joined in reverse) and returns the object's bytes.
    async fn upload(store: &DirectLocalStore, location: &Path, parts: &[Vec<u8>]) -> Vec<u8> {
        let mut upload = store
            .put_multipart_opts(location, PutMultipartOptions::default())
            .await
            .unwrap();
        let mut pending: Vec<UploadPart> = parts
            .iter()
            .map(|part| upload.put_part(PutPayload::from(part.clone())))
            .collect();
        pending.reverse();
        for result in join_all(pending).await {
            result.unwrap();
        }
        upload.complete().await.unwrap();
        store
            .get(location)
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap()
            .to_vec()
    }

    fn staging_files(dir: &tempfile::TempDir) -> Vec<String> {
        let mut found = Vec::new();
        let mut stack = vec![dir.path().to_path_buf()];
        while let Some(next) = stack.pop() {
            for entry in std::fs::read_dir(next).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.to_string_lossy().contains('#') {
                    found.push(path.to_string_lossy().to_string());
                }
            }
        }
        found
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn aligned_parts_and_a_tail_arrive_whole_and_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir, true);
        let parts = vec![pattern(5 << 20, 1), pattern(5 << 20, 2), pattern(12_345, 3)];
        let location = Path::from("data/a/out.lance");
        let bytes = upload(&store, &location, &parts).await;
        assert_eq!(bytes, parts.concat());
        assert!(staging_files(&dir).is_empty());
        let listed: Vec<ObjectMeta> = futures::TryStreamExt::try_collect(store.list(None))
            .await
            .unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].location, location);
        assert_eq!(listed[0].size, (10 << 20) + 12_345);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_direct_descriptor_writes_every_aligned_block_when_the_file_system_allows_it() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("probe.bin");
        let state = UploadState::create(dest.clone(), true).unwrap();
        let data = PutPayload::from(pattern(3 * BOUNCE_BYTES + 5_000, 7));
        state.write_part(0, &data).unwrap();
        let expected_direct = if state.direct.is_some() {
            (3 * BOUNCE_BYTES + 4_096) as u64
        } else {
            0
        };
        assert_eq!(state.direct_bytes.load(Ordering::Relaxed), expected_direct);
        assert_eq!(
            std::fs::read(&state.staging).unwrap(),
            pattern(3 * BOUNCE_BYTES + 5_000, 7)
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unaligned_parts_are_written_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir, true);
        let parts = vec![
            pattern(1_000, 1),
            pattern(8_192, 2),
            pattern(5_000, 3),
            pattern(4_096, 4),
            pattern(BOUNCE_BYTES * 2 + 17, 5),
            pattern(1, 6),
        ];
        let bytes = upload(&store, &Path::from("x/y.bin"), &parts).await;
        assert_eq!(bytes, parts.concat());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn multi_chunk_payloads_are_joined_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir, true);
        let chunks: Vec<Bytes> = (0..5u8)
            .map(|i| Bytes::from(pattern(3_000 + i as usize * 1_111, i)))
            .collect();
        let payload: PutPayload = chunks.iter().cloned().collect();
        let location = Path::from("c.bin");
        let mut upload = store
            .put_multipart_opts(&location, PutMultipartOptions::default())
            .await
            .unwrap();
        upload.put_part(payload).await.unwrap();
        upload
            .put_part(PutPayload::from(pattern(9_999, 9)))
            .await
            .unwrap();
        upload.complete().await.unwrap();
        let mut expected: Vec<u8> = chunks.iter().flat_map(|c| c.to_vec()).collect();
        expected.extend(pattern(9_999, 9));
        assert_eq!(
            store
                .get(&location)
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap()
                .to_vec(),
            expected
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn plain_writes_give_the_same_object() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir, false);
        let parts = vec![pattern(5 << 20, 1), pattern(777, 2)];
        let bytes = upload(&store, &Path::from("p.bin"), &parts).await;
        assert_eq!(bytes, parts.concat());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn abort_and_drop_leave_no_staging_file_and_no_object() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir, true);
        let location = Path::from("d/aborted.bin");
        let mut upload = store
            .put_multipart_opts(&location, PutMultipartOptions::default())
            .await
            .unwrap();
        upload
            .put_part(PutPayload::from(pattern(8_192, 1)))
            .await
            .unwrap();
        upload.abort().await.unwrap();
        assert!(
            upload.complete().await.is_err(),
            "a closed upload cannot complete"
        );
        let mut dropped = store
            .put_multipart_opts(&location, PutMultipartOptions::default())
            .await
            .unwrap();
        dropped
            .put_part(PutPayload::from(pattern(100, 2)))
            .await
            .unwrap();
        drop(dropped);
        assert!(staging_files(&dir).is_empty());
        let err = store.head(&location).await.unwrap_err();
        assert!(matches!(err, object_store::Error::NotFound { .. }), "{err}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_uploads_to_one_path_use_distinct_staging_files() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(&dir, true);
        let location = Path::from("same.bin");
        let mut first = store
            .put_multipart_opts(&location, PutMultipartOptions::default())
            .await
            .unwrap();
        let mut second = store
            .put_multipart_opts(&location, PutMultipartOptions::default())
            .await
            .unwrap();
        first
            .put_part(PutPayload::from(pattern(4_096, 1)))
            .await
            .unwrap();
        second
            .put_part(PutPayload::from(pattern(4_096, 2)))
            .await
            .unwrap();
        assert_eq!(staging_files(&dir).len(), 2);
        second.complete().await.unwrap();
        first.abort().await.unwrap();
        assert_eq!(
            store
                .get(&location)
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap()
                .to_vec(),
            pattern(4_096, 2)
        );
        assert!(staging_files(&dir).is_empty());
    }
}
