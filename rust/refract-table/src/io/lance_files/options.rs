//! How a Lance file is opened ([`ReadOptions`]) and how its pages are laid
//! out when written ([`PageLayout`]): the one options type of each side.

use refract_core::checksum::FileChecksum;

/// How [`super::LanceFileReader::open`] reads a file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReadMode {
    /// Ranged reads, with the file's metadata kept in the store's Lance cache
    /// for later opens.
    #[default]
    Cached,
    /// Ranged reads, nothing kept in the store's Lance cache: one-pass reads
    /// of files about to be replaced (compaction), where caching thousands of
    /// small files' metadata only evicts useful entries and leaves long-lived
    /// allocations behind.
    OnePass,
    /// Like [`ReadMode::OnePass`], with at most `read_buffer_bytes` of I/O in
    /// flight instead of [`super::READ_BUFFER_BYTES`]: for one-pass reads
    /// whose consumer works through small windows (index remaps,
    /// [`super::STREAMING_READ_BUFFER_BYTES`]), so read-ahead does not hold
    /// far more of the file than is being rewritten. A back-pressure limit,
    /// not a cap on one request: a single larger page is still read. Zero is
    /// InvalidInput.
    Streaming {
        /// Bytes of I/O in flight at most.
        read_buffer_bytes: u64,
    },
    /// The whole file in one request, then read from memory; nothing cached.
    /// For one-pass reads of small files (compaction sources), where Lance's
    /// ranged reads would cost several requests per file. Needs
    /// [`ReadOptions::known_size`] (a file of another size is Corrupt); a size
    /// over [`super::PREFETCH_LIMIT_BYTES`] is InvalidInput.
    WholeFile,
}

/// What [`super::LanceFileReader::open`] knows about a file and how it reads
/// it. The default opens with a HEAD request, verifies nothing and caches
/// the metadata.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadOptions<'a> {
    /// The file's size as the manifest records it: saves a HEAD request, and
    /// a file of another size is an error naming both sizes.
    pub known_size: Option<u64>,
    /// The checksum the metadata referencing the file recorded: every read
    /// verifies the blocks it touches (a mismatch is Corrupt naming the block).
    pub checksum: Option<&'a FileChecksum>,
    /// How the file is read.
    pub mode: ReadMode,
}

/// How [`super::LanceFileWriter::create`] buffers and lays out pages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PageLayout {
    /// Lance's defaults: each batch's arrays are copied, and about 8 MiB per
    /// column is buffered before a page is encoded.
    #[default]
    Buffered,
    /// Like [`PageLayout::Buffered`], holding each batch's arrays by reference
    /// until their page is written instead of copying them first: for batches
    /// that own their buffers and are dropped after writing (compaction
    /// outputs), so keeping them costs no more memory than the copy would.
    KeepBatches,
    /// Like [`PageLayout::KeepBatches`], buffering about `page_bytes` per
    /// column before a page is encoded and uploading in parts of that size
    /// (at least the store's minimum part): for one-pass rewrites of index
    /// files (remaps, [`super::STREAMING_PAGE_BYTES`]) whose memory should not
    /// follow Lance's page buffers. Zero is InvalidInput.
    Streaming {
        /// Bytes buffered per column before a page is written.
        page_bytes: u64,
    },
    /// Every batch its own page, (almost) nothing buffered between batches:
    /// for files whose readers fetch whole batches by page (row maps, one
    /// page per label block).
    PagePerBatch,
}
