//! An object-store wrapper that verifies every read of known files against
//! their block checksums.
//!
//! Lance readers fetch byte ranges of a file. For each file it knows (path,
//! size, [`FileChecksum`]), [`VerifyingStore`] widens a read to the whole
//! checksum blocks it touches, verifies them, and returns exactly the bytes
//! asked for. A mismatch fails the read with a Corrupt
//! [`refract_core::Error`] naming the file and block, which the Lance error
//! mapping recovers from the error chain ([`verification_failure`]). Every
//! other request passes through unchanged.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    Attributes, CopyOptions, GetOptions, GetRange, GetResult, GetResultPayload, ListResult,
    MultipartUpload, ObjectMeta, ObjectStore, ObjectStoreExt, PutMultipartOptions, PutOptions,
    PutPayload, PutResult,
};
use refract_core::checksum::FileChecksum;
use refract_core::Error;

/// Name under which verification failures travel through object_store errors.
const STORE_NAME: &str = "refract-verify";
/// Verified spans of at most this many bytes are kept for later reads, so
/// the footer, metadata and page reads of a small file (one block) cost one
/// request and one verification, not one each.
const KEPT_SPAN_BYTES: usize = 2 << 20;
/// Verified spans kept at most (most recent first).
const KEPT_SPANS: usize = 4;
/// A read of fewer bytes also fetches the blocks after it, up to this many
/// bytes in all (kept for later reads). Lance decodes a page by reading its
/// metadata and then its data close by; on a remote store the second request
/// costs a round trip, the extra bytes of the first next to nothing.
const MIN_READ_BYTES: u64 = 256 * 1024;

/// A verified span of a file: where it starts, its bytes, the file's metadata.
#[derive(Debug)]
struct KeptSpan {
    location: Path,
    start: u64,
    bytes: Bytes,
    meta: ObjectMeta,
}

/// What a verified file must hold.
#[derive(Debug, Clone)]
struct Expected {
    /// Dataset-relative path, for errors.
    name: String,
    size: u64,
    checksum: FileChecksum,
}

/// Verifies reads of the files it was given; see the module docs.
#[derive(Debug)]
pub(crate) struct VerifyingStore {
    inner: Arc<dyn ObjectStore>,
    files: HashMap<Path, Expected>,
    kept: Mutex<VecDeque<KeptSpan>>,
}

impl fmt::Display for VerifyingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VerifyingStore({})", self.inner)
    }
}

impl VerifyingStore {
    /// A store verifying nothing yet.
    pub(crate) fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Self {
            inner,
            files: HashMap::new(),
            kept: Mutex::new(VecDeque::new()),
        }
    }

    /// Verifies reads of `path` (named `name` in errors), a file of `size`
    /// bytes with `checksum`.
    pub(crate) fn verify_file(
        &mut self,
        path: Path,
        name: String,
        size: u64,
        checksum: FileChecksum,
    ) {
        self.files.insert(
            path,
            Expected {
                name,
                size,
                checksum,
            },
        );
    }

    async fn verified_get(
        &self,
        location: &Path,
        expected: &Expected,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let wanted = resolve(options.range.as_ref(), expected.size).map_err(fail)?;
        if let Some(result) = self.kept_read(location, &wanted) {
            return Ok(result);
        }
        let covering = expected.checksum.covering(wanted.clone(), expected.size);
        let fetched = with_read_ahead(covering.clone(), expected);
        let widened = GetOptions {
            range: (!fetched.is_empty()).then(|| GetRange::Bounded(fetched.clone())),
            ..options
        };
        let result = match self.inner.get_opts(location, widened).await {
            Ok(result) => result,
            Err(err @ object_store::Error::NotFound { .. }) => return Err(err),
            Err(err) => {
                // A file shorter than recorded refuses the range: say so.
                return Err(match self.inner.head(location).await {
                    Ok(meta) if meta.size != expected.size => {
                        fail(size_mismatch(expected, meta.size))
                    }
                    _ => err,
                });
            }
        };
        let meta = result.meta.clone();
        let attributes = result.attributes.clone();
        let extensions = result.extensions.clone();
        if meta.size != expected.size {
            return Err(fail(size_mismatch(expected, meta.size)));
        }
        let bytes = match result.payload {
            _ if fetched.is_empty() => Bytes::new(),
            // A local file, not read yet: read and verify it piece by piece.
            GetResultPayload::File(file, _) => {
                let (expected, fetched, asked_end) =
                    (expected.clone(), fetched.clone(), covering.end);
                tokio::task::spawn_blocking(move || {
                    read_verified_local(file, fetched, asked_end, &expected)
                })
                .await
                .map_err(fail_external)?
                .map_err(fail)?
                .into()
            }
            payload => {
                let fetched_bytes = GetResult {
                    payload,
                    meta: meta.clone(),
                    range: fetched.clone(),
                    attributes: attributes.clone(),
                    extensions: extensions.clone(),
                }
                .bytes()
                .await?;
                verified_prefix(fetched_bytes, covering.clone(), expected).map_err(fail)?
            }
        };
        let from = usize::try_from(wanted.start - covering.start).map_err(fail_external)?;
        let to = usize::try_from(wanted.end - covering.start).map_err(fail_external)?;
        let slice = bytes.slice(from..to.min(bytes.len()));
        if bytes.len() <= KEPT_SPAN_BYTES {
            self.keep(KeptSpan {
                location: location.clone(),
                start: covering.start,
                bytes,
                meta: meta.clone(),
            });
        }
        Ok(GetResult {
            payload: single_chunk(slice),
            meta,
            range: wanted,
            attributes,
            extensions,
        })
    }

    /// `wanted` of `location` from a kept verified span, if one holds it.
    fn kept_read(&self, location: &Path, wanted: &Range<u64>) -> Option<GetResult> {
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let span = kept.iter().find(|span| {
            span.location == *location
                && span.start <= wanted.start
                && wanted.end <= span.start + span.bytes.len() as u64
        })?;
        let from = usize::try_from(wanted.start - span.start).ok()?;
        let to = usize::try_from(wanted.end - span.start).ok()?;
        Some(GetResult {
            payload: single_chunk(span.bytes.slice(from..to)),
            meta: span.meta.clone(),
            range: wanted.clone(),
            attributes: Attributes::default(),
            extensions: Default::default(),
        })
    }

    fn keep(&self, span: KeptSpan) {
        // Spans are whole values pushed under the lock; a poisoned lock
        // still holds only complete, verified spans.
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.push_front(span);
        kept.truncate(KEPT_SPANS);
    }
}

/// The verified start of `fetched_bytes`, read from `covering.start`: the
/// blocks up to `covering.end` must verify; blocks read ahead after them are
/// kept up to the first that does not, so damage outside a read never fails it.
fn verified_prefix(
    fetched_bytes: Bytes,
    covering: Range<u64>,
    expected: &Expected,
) -> refract_core::Result<Bytes> {
    let asked = usize::try_from(covering.end - covering.start)
        .unwrap_or(usize::MAX)
        .min(fetched_bytes.len());
    expected.checksum.verify(
        &expected.name,
        expected.size,
        covering.start,
        &fetched_bytes[..asked],
    )?;
    let ahead = verified_blocks(
        &fetched_bytes[asked..],
        covering.start + asked as u64,
        expected,
    );
    Ok(fetched_bytes.slice(..asked + ahead))
}

/// How many leading bytes of `bytes` (whole blocks from `start`, read ahead
/// of a request) verify: the blocks up to the first that does not.
fn verified_blocks(bytes: &[u8], start: u64, expected: &Expected) -> usize {
    let block = usize::try_from(expected.checksum.block_bytes()).unwrap_or(usize::MAX);
    let mut verified = 0;
    for chunk in bytes.chunks(block) {
        let at = start + verified as u64;
        if expected
            .checksum
            .verify(&expected.name, expected.size, at, chunk)
            .is_err()
        {
            break;
        }
        verified += chunk.len();
    }
    verified
}

/// Bytes of a local file read, then checksummed, at a time: whole blocks,
/// few enough to still be in the CPU cache when they are checksummed. A CRC
/// of memory read long before runs at memory speed, several times slower.
const VERIFY_PIECE_BYTES: u64 = 256 * 1024;

/// Reads `fetched` (whole blocks) of a local `file`, checksumming each piece
/// right after reading it, with the rules of [`verified_prefix`]: the blocks
/// before `asked_end` must verify; read-ahead blocks are kept up to the first
/// that does not.
fn read_verified_local(
    mut file: File,
    fetched: Range<u64>,
    asked_end: u64,
    expected: &Expected,
) -> refract_core::Result<Vec<u8>> {
    let block = expected.checksum.block_bytes();
    // Both are powers of two, so a piece is a whole number of blocks.
    let piece = VERIFY_PIECE_BYTES.max(block);
    let reading = |e: std::io::Error| Error::external(format!("reading {}", expected.name), e);
    file.seek(SeekFrom::Start(fetched.start)).map_err(reading)?;
    let capacity = usize::try_from(fetched.end - fetched.start).unwrap_or(0);
    let mut bytes = Vec::with_capacity(capacity);
    let mut at = fetched.start;
    while at < fetched.end {
        let end = at.saturating_add(piece).min(fetched.end);
        let from = bytes.len();
        // Zeroing the piece first costs less than the extra system calls
        // of reading into spare capacity (`read_to_end` probes for the end).
        let len = usize::try_from(end - at).map_err(|e| Error::external("piece length", e))?;
        bytes.resize(from + len, 0);
        file.read_exact(&mut bytes[from..]).map_err(reading)?;
        let asked = usize::try_from(asked_end.saturating_sub(at))
            .unwrap_or(usize::MAX)
            .min(len);
        if asked > 0 {
            expected.checksum.verify(
                &expected.name,
                expected.size,
                at,
                &bytes[from..from + asked],
            )?;
        }
        // Read ahead: keep the blocks up to the first that does not verify.
        let kept =
            from + asked + verified_blocks(&bytes[from + asked..], at + asked as u64, expected);
        if kept < bytes.len() {
            bytes.truncate(kept);
            break;
        }
        at = end;
    }
    Ok(bytes)
}

/// `covering` (whole blocks) extended to [`MIN_READ_BYTES`] where it is
/// shorter, still ending on a block boundary or at the end of the file.
fn with_read_ahead(covering: Range<u64>, expected: &Expected) -> Range<u64> {
    let short = !covering.is_empty() && covering.end - covering.start < MIN_READ_BYTES;
    if !short || !MIN_READ_BYTES.is_multiple_of(expected.checksum.block_bytes()) {
        return covering;
    }
    covering.start
        ..covering
            .start
            .saturating_add(MIN_READ_BYTES)
            .min(expected.size)
}

fn single_chunk(bytes: Bytes) -> GetResultPayload {
    GetResultPayload::Stream(futures::stream::once(async { Ok(bytes) }).boxed())
}

fn size_mismatch(expected: &Expected, actual: u64) -> Error {
    Error::corrupt(
        &expected.name,
        format!(
            "file is {actual} bytes but {} bytes were expected",
            expected.size
        ),
    )
}

/// The bytes a request asks for in a file of `size` bytes.
fn resolve(range: Option<&GetRange>, size: u64) -> refract_core::Result<Range<u64>> {
    let wanted = match range {
        None => 0..size,
        Some(GetRange::Bounded(range)) => range.start..range.end.min(size),
        Some(GetRange::Offset(offset)) => *offset..size,
        Some(GetRange::Suffix(len)) => size.saturating_sub(*len)..size,
    };
    if wanted.start > wanted.end {
        return Err(Error::invalid_input(format!(
            "byte range {wanted:?} lies outside a {size}-byte file"
        )));
    }
    Ok(wanted)
}

fn fail(err: Error) -> object_store::Error {
    object_store::Error::Generic {
        store: STORE_NAME,
        source: Box::new(err),
    }
}

fn fail_external(err: impl std::error::Error + Send + Sync + 'static) -> object_store::Error {
    object_store::Error::Generic {
        store: STORE_NAME,
        source: Box::new(err),
    }
}

/// The verification failure somewhere in `err`'s source chain, if any:
/// error mappings return it instead of a generic store failure.
pub(crate) fn verification_failure(err: &(dyn std::error::Error + 'static)) -> Option<Error> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(Error::Corrupt { what, message }) = e.downcast_ref::<Error>() {
            return Some(Error::corrupt(what.clone(), message.clone()));
        }
        current = e.source();
    }
    None
}

#[async_trait]
impl ObjectStore for VerifyingStore {
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
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        match self.files.get(location) {
            Some(expected) if !options.head => self.verified_get(location, expected, options).await,
            _ => self.inner.get_opts(location, options).await,
        }
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
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
}

#[cfg(test)]
mod tests {
    use object_store::local::LocalFileSystem;
    use object_store::memory::InMemory;
    use rstest::rstest;

    use super::*;

    fn contents() -> Vec<u8> {
        (0..200_000u32).map(|i| (i * 31 % 251) as u8).collect()
    }

    /// The two ways bytes come back: a stream (memory, object stores) and a
    /// local file read piece by piece ([`read_verified_local`]). The
    /// directory lives as long as the store.
    fn backend(local: bool) -> (Arc<dyn ObjectStore>, Option<tempfile::TempDir>) {
        if local {
            let dir = tempfile::tempdir().unwrap();
            let store = LocalFileSystem::new_with_prefix(dir.path()).unwrap();
            (Arc::new(store), Some(dir))
        } else {
            (Arc::new(InMemory::new()), None)
        }
    }

    async fn store_with(bytes: Vec<u8>, checksum: FileChecksum) -> VerifyingStore {
        store_on(Arc::new(InMemory::new()), bytes, checksum).await
    }

    async fn store_on(
        inner: Arc<dyn ObjectStore>,
        bytes: Vec<u8>,
        checksum: FileChecksum,
    ) -> VerifyingStore {
        inner
            .put(&Path::from("data/f.lance"), PutPayload::from(bytes))
            .await
            .unwrap();
        let mut store = VerifyingStore::new(inner);
        store.verify_file(
            Path::from("data/f.lance"),
            "data/f.lance".to_string(),
            200_000,
            checksum,
        );
        store
    }

    #[rstest]
    #[tokio::test]
    async fn ranged_reads_return_exactly_the_range_and_verify_only_its_blocks(
        #[values(false, true)] local: bool,
    ) {
        let bytes = contents();
        let mut damaged = bytes.clone();
        damaged[150_000] ^= 0x10;
        let (inner, _dir) = backend(local);
        let store = store_on(inner, damaged, FileChecksum::of(&bytes)).await;
        let path = Path::from("data/f.lance");
        let got = store.get_range(&path, 70_000..70_100).await.unwrap();
        assert_eq!(&got[..], &bytes[70_000..70_100]);
        let err = store.get_range(&path, 140_000..140_001).await.unwrap_err();
        let found = verification_failure(&err).expect("a verification failure");
        assert_eq!(
            found.to_string(),
            "corrupt data/f.lance: checksum mismatch in block 2 (bytes 131072..196608)"
        );
        // A whole read is verified before any byte is returned.
        assert!(store.get(&path).await.is_err());
    }

    #[rstest]
    #[tokio::test]
    async fn a_short_read_reads_ahead_and_never_fails_on_blocks_it_did_not_ask_for(
        #[values(false, true)] local: bool,
    ) {
        let bytes: Vec<u8> = (0..600_000u32).map(|i| (i * 7 % 253) as u8).collect();
        let mut damaged = bytes.clone();
        damaged[250_000] ^= 0x01; // block 3, read ahead of block 0
        let (inner, _dir) = backend(local);
        let path = Path::from("data/f.lance");
        inner.put(&path, PutPayload::from(damaged)).await.unwrap();
        let counting = Arc::new(crate::io::CountingStore::new(inner));
        let mut store = VerifyingStore::new(counting.clone());
        store.verify_file(
            path.clone(),
            "data/f.lance".to_string(),
            600_000,
            FileChecksum::of(&bytes),
        );
        // Block 0 is asked for; blocks 1..=3 come with it, and block 3 is damaged.
        assert_eq!(
            &store.get_range(&path, 10..20).await.unwrap()[..],
            &bytes[10..20]
        );
        assert_eq!(counting.stats().get_ranges, 1);
        assert_eq!(counting.stats().bytes_read, MIN_READ_BYTES);
        // Blocks 1 and 2 verified: served from memory.
        assert_eq!(
            &store.get_range(&path, 100_000..190_000).await.unwrap()[..],
            &bytes[100_000..190_000]
        );
        assert_eq!(counting.stats().get_ranges, 1);
        // Block 3 was dropped, not kept: asked for, it is fetched and fails.
        let err = store.get_range(&path, 240_000..240_010).await.unwrap_err();
        let found = verification_failure(&err).expect("a verification failure");
        assert_eq!(
            found.to_string(),
            "corrupt data/f.lance: checksum mismatch in block 3 (bytes 196608..262144)"
        );
        assert_eq!(counting.stats().get_ranges, 2);
        // Beyond the read-ahead: a request.
        assert_eq!(
            &store.get_range(&path, 400_000..400_010).await.unwrap()[..],
            &bytes[400_000..400_010]
        );
        assert_eq!(counting.stats().get_ranges, 3);
    }

    #[tokio::test]
    async fn suffix_offset_and_whole_reads_are_verified() {
        let bytes = contents();
        let store = store_with(bytes.clone(), FileChecksum::of(&bytes)).await;
        let path = Path::from("data/f.lance");
        let suffix = store
            .get_opts(
                &path,
                GetOptions {
                    range: Some(GetRange::Suffix(100)),
                    ..GetOptions::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(suffix.range, 199_900..200_000);
        assert_eq!(&suffix.bytes().await.unwrap()[..], &bytes[199_900..]);
        let whole = store.get(&path).await.unwrap().bytes().await.unwrap();
        assert_eq!(&whole[..], &bytes[..]);
    }

    #[tokio::test]
    async fn a_file_of_another_size_is_corrupt() {
        let bytes = contents();
        let store = store_with(bytes[..150_000].to_vec(), FileChecksum::of(&bytes)).await;
        // Inside the shorter file, and past its end (the store refuses the range).
        for range in [0..10, 180_000..190_000] {
            let err = store
                .get_range(&Path::from("data/f.lance"), range)
                .await
                .unwrap_err();
            let found = verification_failure(&err).expect("a verification failure");
            assert!(found.to_string().contains("150000 bytes"), "{found}");
        }
    }

    #[tokio::test]
    async fn reads_inside_a_kept_span_need_no_request() {
        let bytes = contents();
        let memory = Arc::new(InMemory::new());
        memory
            .put(&Path::from("data/f.lance"), PutPayload::from(bytes.clone()))
            .await
            .unwrap();
        let counting = Arc::new(crate::io::CountingStore::new(
            memory as Arc<dyn ObjectStore>,
        ));
        let mut store = VerifyingStore::new(counting.clone());
        store.verify_file(
            Path::from("data/f.lance"),
            "data/f.lance".to_string(),
            200_000,
            FileChecksum::of(&bytes),
        );
        let path = Path::from("data/f.lance");
        // The footer read fetches its block (the file's last 3,392 bytes).
        assert_eq!(
            &store.get_range(&path, 199_000..200_000).await.unwrap()[..],
            &bytes[199_000..]
        );
        // Reads inside that block, and of the same bytes again, cost nothing.
        assert_eq!(
            &store.get_range(&path, 196_700..196_800).await.unwrap()[..],
            &bytes[196_700..196_800]
        );
        assert_eq!(
            &store.get_range(&path, 199_000..200_000).await.unwrap()[..],
            &bytes[199_000..]
        );
        assert_eq!(counting.stats().get_ranges, 1);
        // Another block is fetched.
        assert_eq!(
            &store.get_range(&path, 10..20).await.unwrap()[..],
            &bytes[10..20]
        );
        assert_eq!(counting.stats().get_ranges, 2);
    }
}
