//! Files as the metadata that references them records them, and the journal
//! that collects them as they are written.
//!
//! A component that writes files whose names it does not report one by one
//! (an index type writing a segment) writes through a recording view of the
//! store ([`DatasetStore::recording`](super::DatasetStore::recording)); the
//! caller then takes what was written under a directory from the
//! [`FileJournal`] and stores it with the metadata, so every later read can
//! be verified ([`DatasetStore::verifying`](super::DatasetStore::verifying)).

use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use refract_core::checksum::{ChecksumBuilder, FileChecksum};
use refract_core::{Error, Result};

use super::paths::RelativePath;

/// One stored file: where it is, its size and its block checksums.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedFile {
    /// Path relative to the dataset root.
    pub path: RelativePath,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Block checksums of its bytes.
    pub checksum: FileChecksum,
}

/// The files written through a recording store view, in write order.
#[derive(Debug, Default)]
pub struct FileJournal {
    files: Mutex<Vec<RecordedFile>>,
}

impl FileJournal {
    /// An empty journal.
    pub fn new() -> Self {
        Self::default()
    }

    /// Notes that `file` was written (a later write of the same path wins).
    pub(crate) fn record(&self, file: RecordedFile) {
        // Entries are whole values pushed under the lock; a poisoned lock
        // still holds only complete entries.
        let mut files = self.files.lock().unwrap_or_else(PoisonError::into_inner);
        files.retain(|known| known.path != file.path);
        files.push(file);
    }

    /// Removes and returns the files written under `dir`, sorted by path.
    pub fn take_under(&self, dir: &RelativePath) -> Vec<RecordedFile> {
        let mut files = self.files.lock().unwrap_or_else(PoisonError::into_inner);
        let prefix = format!("{}/", dir.as_str().trim_end_matches('/'));
        let (mut under, rest): (Vec<_>, Vec<_>) = files
            .drain(..)
            .partition(|file| file.path.as_str().starts_with(&prefix));
        *files = rest;
        under.sort_by(|a, b| a.path.cmp(&b.path));
        under
    }
}

/// Checks a file's bytes, streamed in pieces, against `expected` without
/// holding the file in memory.
///
/// # Errors
/// Corrupt naming the file when the size or any block differs; the stream's
/// own errors pass through.
pub(crate) async fn verify_stream(
    expected: &RecordedFile,
    pieces: BoxStream<'_, Result<Bytes>>,
) -> Result<()> {
    verify_checksum_stream(
        &expected.path,
        Some(expected.size_bytes),
        &expected.checksum,
        pieces,
    )
    .await
    .map(|_| ())
}

/// Like [`verify_stream`] for a file whose size may be known only through
/// its checksum (`size` `None`); returns the size read.
///
/// # Errors
/// As [`verify_stream`].
pub(crate) async fn verify_checksum_stream(
    path: &RelativePath,
    size: Option<u64>,
    checksum: &FileChecksum,
    mut pieces: BoxStream<'_, Result<Bytes>>,
) -> Result<u64> {
    let mut builder = ChecksumBuilder::new();
    while let Some(piece) = pieces.next().await {
        builder.update(&piece?);
        if size.is_some_and(|expected| builder.len() > expected) {
            break;
        }
    }
    let read = builder.len();
    if let Some(expected) = size.filter(|expected| *expected != read) {
        let over = if read > expected { "over " } else { "" };
        return Err(Error::corrupt(
            path.to_string(),
            format!("file is {over}{read} bytes but {expected} bytes were expected"),
        ));
    }
    let actual = builder.finish();
    if let Some(block) = first_difference(&actual, checksum) {
        let from = block * actual.block_bytes();
        return Err(Error::corrupt(
            path.to_string(),
            format!(
                "checksum mismatch in block {block} (bytes {from}..{})",
                (from + actual.block_bytes()).min(read)
            ),
        ));
    }
    Ok(read)
}

/// The first block whose checksums differ (checksums of files of one size
/// use the same blocks).
fn first_difference(actual: &FileChecksum, expected: &FileChecksum) -> Option<u64> {
    if actual.block_bytes() != expected.block_bytes()
        || actual.blocks().len() != expected.blocks().len()
    {
        return Some(0);
    }
    actual
        .blocks()
        .iter()
        .zip(expected.blocks())
        .position(|(a, b)| a != b)
        .map(|block| block as u64)
}

#[cfg(test)]
mod tests {
    use futures::stream;

    use super::*;

    fn recorded(path: &str, bytes: &[u8]) -> RecordedFile {
        RecordedFile {
            path: RelativePath::parse(path).unwrap(),
            size_bytes: bytes.len() as u64,
            checksum: FileChecksum::of(bytes),
        }
    }

    fn pieces(bytes: &[u8]) -> BoxStream<'static, Result<Bytes>> {
        let chunks: Vec<Result<Bytes>> = bytes
            .chunks(10_007)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        stream::iter(chunks).boxed()
    }

    #[test]
    fn take_under_returns_one_directory_sorted_and_keeps_the_rest() {
        let journal = FileJournal::new();
        journal.record(recorded("_indices/b/z.lance", b"1"));
        journal.record(recorded("_indices/a/y.lance", b"2"));
        journal.record(recorded("_indices/b/x.lance", b"3"));
        journal.record(recorded("_indices/b/z.lance", b"44"));
        let under = journal.take_under(&RelativePath::parse("_indices/b").unwrap());
        let names: Vec<(&str, u64)> = under
            .iter()
            .map(|f| (f.path.as_str(), f.size_bytes))
            .collect();
        assert_eq!(
            names,
            vec![("_indices/b/x.lance", 1), ("_indices/b/z.lance", 2)]
        );
        // A directory may be written with its trailing slash.
        let rest = journal.take_under(&RelativePath::parse("_indices/a/").unwrap());
        assert_eq!(rest.len(), 1);
    }

    #[tokio::test]
    async fn streamed_verification_finds_flips_and_size_changes() {
        let bytes: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
        let expected = recorded("_indices/a/v.lance", &bytes);
        verify_stream(&expected, pieces(&bytes)).await.unwrap();
        let mut damaged = bytes.clone();
        damaged[200_000] ^= 2;
        let err = verify_stream(&expected, pieces(&damaged))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "corrupt _indices/a/v.lance: checksum mismatch in block 3 (bytes 196608..262144)"
        );
        let err = verify_stream(&expected, pieces(&bytes[..1000]))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    }
}
